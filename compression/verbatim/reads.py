"""The files an agent reads, kept in view for the edits that depend on them (pure).

A coding agent edits what it read earlier, and an edit's old text must match the file: a read pruned
to a one-liner leaves the model to rebuild the file from memory. So for each file the summarized
region read (found by `compression.verbatim.fileops`, which knows the tools of Codex, Claude Code,
OpenCode, Gemini CLI and SWE-agent), the newest read is carried verbatim inside the handoff while
`file_share` of the threshold allows:

    1. the working set's files (`compression.verbatim.workingset`): the files the user's
       words name, then those the agent edited, then those it read again;
    2. other files the agent edits after reading them, or touches again later;
    3. the rest;

newest first within each group. A read the agent wrote the file over since (a whole-file
write) is out of date and not carried. What does not fit whole keeps its head and tail (the proxy
writes its handle into the clip), like a carried user message; what does not fit even clipped
is named by the summary's archive line. A read the view holds verbatim elsewhere needs no copy,
and a read that a later read of the same file supersedes is never carried.

Older reads of a file that the view also holds a newer whole read of are `superseded`: the
tail keeps a short note in their place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from compression.messages.content import content_text, with_text
from compression.messages.types import Message
from compression.summary.handoff import handoff_text, parse_handoff, without_recalled
from compression.summary.prompts import FILE_CLOSE, FILE_OPEN, FILES_HEADER
from compression.verbatim.fileops import FileOp, file_ops
from compression.verbatim.userwords import clip
from compression.verbatim.workingset import WorkingSet

SUPERSEDED_NOTE = "[superseded: {path} was read again later; the newer read is in view]"


@dataclass(frozen=True, slots=True)
class FileRead:
    path: str
    text: str
    at: int  # view position of the read's result, or of the handoff that carried it
    touched: int  # the newest view position that reads or edits the file
    edited: bool  # the agent edits the file after this read
    result: bool = True  # `at` is the read's own result (False: an earlier handoff carried it)


@dataclass(frozen=True, slots=True)
class ClippedRead:
    at: int  # view position of the read's result
    kept: int
    original: int


@dataclass(frozen=True, slots=True)
class FileSelection:
    files: tuple[tuple[str, str], ...] = ()  # (path, text), in the order they were read
    clipped: tuple[ClippedRead, ...] = ()
    tokens: int = 0


def newest_reads(
    messages: Sequence[Message], ops: Sequence[FileOp] | None = None
) -> list[FileRead]:
    """The newest read of every file the view reads, oldest first: an answered read op, or
    a block an earlier handoff carried when no read of the view is newer."""
    ops = file_ops(messages) if ops is None else ops
    newest: dict[str, FileRead] = {}
    for at, message in enumerate(messages):
        summary = handoff_text(message)
        parsed = parse_handoff(summary) if summary is not None else None
        for path, text in parsed.handoff.files if parsed is not None else ():
            newest[path] = FileRead(path, text, at, at, False, result=False)
    for op in ops:
        if op.kind != "read" or op.result is None:
            continue
        known = newest.get(op.path)
        if known is None or known.at <= op.result:
            text = without_recalled(content_text(messages[op.result]))
            newest[op.path] = FileRead(op.path, text, op.result, op.result, False)
    touched: dict[str, int] = {}
    edited: set[str] = set()
    rewritten: set[str] = set()  # written whole after the read: the read is out of date
    for op in ops:
        touched[op.path] = max(touched.get(op.path, -1), op.call, op.result or -1)
        read = newest.get(op.path)
        if op.kind == "edit" and read is not None and op.call > read.at:
            edited.add(op.path)
            if op.whole:
                rewritten.add(op.path)
    found = [
        replace(r, touched=max(r.touched, touched.get(r.path, -1)), edited=r.path in edited)
        for r in newest.values()
        if r.text.strip() and r.path not in rewritten
    ]
    return sorted(found, key=lambda r: r.at)


def read_candidates(reads: Sequence[FileRead], start: int, end: int) -> list[FileRead]:
    """The newest reads held in `[start, end)`: the region a summary replaces."""
    return [read for read in reads if start <= read.at < end]


def priority(candidates: Sequence[FileRead], working: WorkingSet | None = None) -> list[FileRead]:
    """The working set's files first (named by the user, then edited, then re-read), then
    the other edited or later-touched files, then the rest; the newest touched first in each."""
    newest_first = sorted(candidates, key=lambda r: r.touched, reverse=True)
    working = working or WorkingSet()
    core = sorted(
        (r for r in newest_first if working.core(r.path)), key=lambda r: working.tier(r.path)
    )
    rest = [r for r in newest_first if not working.core(r.path)]
    worked_on = [r for r in rest if r.edited or r.touched > r.at]
    return core + worked_on + [r for r in rest if not (r.edited or r.touched > r.at)]


def files_need(reads: Sequence[FileRead], start: int, count: Callable[[str], int]) -> int:
    """What carrying every newest read after `start` would cost (the tail's included: where
    the cut falls is not known yet)."""
    sized = [count(r.text) + _overhead(r.path, count) for r in reads if r.at >= start]
    return count(FILES_HEADER) + sum(sized) if sized else 0


def select_files(
    candidates: Sequence[FileRead],
    budget: int,
    count: Callable[[str], int],
    present: Callable[[str], bool] | None = None,
    working: WorkingSet | None = None,
) -> FileSelection:
    """The reads to carry within `budget` tokens, in `priority` order: whole while they fit,
    then clipped."""
    wanted = [r for r in priority(candidates, working) if present is None or not present(r.text)]
    if not wanted:
        return FileSelection()
    left = budget - count(FILES_HEADER)
    # Keyed by place and path: one handoff carries several files at the same place.
    chosen: dict[tuple[int, str], tuple[str, str]] = {}
    clipped: list[ClippedRead] = []
    for read in wanted:
        overhead = _overhead(read.path, count)
        size = count(read.text)
        if size + overhead <= left:
            chosen[read.at, read.path] = (read.path, read.text)
            left -= size + overhead
            continue
        text = clip(read.text, left - overhead, count)
        if text is None:
            continue
        chosen[read.at, read.path] = (read.path, text)
        used = count(text)
        left -= used + overhead
        if read.result:
            clipped.append(ClippedRead(read.at, used, size))
    if not chosen:
        return FileSelection()
    ordered = tuple(chosen[key] for key in sorted(chosen, key=lambda key: key[0]))
    return FileSelection(ordered, tuple(clipped), budget - left)


def _overhead(path: str, count: Callable[[str], int]) -> int:
    return count(f"{FILE_OPEN}{path}>>>\n\n{FILE_CLOSE}\n")


def superseded(messages: Sequence[Message], start: int, ops: Sequence[FileOp]) -> list[Message]:
    """`messages` with each tool result from `start` on that only reads a file the view reads
    whole again later replaced by a short note (its call stays, so the pair stays valid)."""
    out = list(messages)
    newer_whole: dict[str, int] = {}
    per_result: dict[int, int] = {}
    for op in ops:
        if op.result is not None:
            per_result[op.result] = per_result.get(op.result, 0) + 1
        if op.kind == "read" and op.whole and op.result is not None:
            newer_whole[op.path] = max(newer_whole.get(op.path, -1), op.result)
    for op in ops:
        result = op.result
        if op.kind != "read" or result is None or result < start or per_result[result] > 1:
            continue
        if newer_whole.get(op.path, -1) > result and messages[result].get("role") == "tool":
            note = SUPERSEDED_NOTE.format(path=op.path)
            if len(note) < len(content_text(messages[result])):
                out[result] = with_text(messages[result], note)
    return out
