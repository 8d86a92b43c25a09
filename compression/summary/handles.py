"""Handles: the short names under which ctxgate keeps what a compression removed (pure).

A client message at position N of the client's list (0-based, the whole conversation, across
rotations) is archived as `mN` when a compression replaces it. The compacted view names those
handles where the content used to be, and the model reads the originals back through ctxgate's
recall tool:

    summary        its first line after the reference-only prefix lists every replaced range:
                   "[Archived originals: m2-m40, m43 ...]"
    rewritten      a one-liner, a pruned or clipped message ends with "[archived: m12]"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, cast

from compression.messages.content import content_text
from compression.messages.types import ContentPart, Message
from compression.summary.handoff import handoff_text, parse_handoff, user_text
from compression.summary.prompts import (
    ARCHIVE_OPEN,
    FILE_CLOSE,
    FILE_OPEN,
    SUMMARY_PREFIX,
    USER_CLOSE,
    USER_OPEN,
)

RECALL_TOOL = "ctxgate_recall"

_HANDLE = re.compile(r"^m(\d{1,9})$")
_RANGE = re.compile(r"^m(\d{1,9})\s*[-\u2013]\s*m?(\d{1,9})$")
ARCHIVE_LINE = re.compile("^" + re.escape(ARCHIVE_OPEN) + r"[^\n]*\]\n", re.MULTILINE)
SUFFIX = re.compile(r"\n\[archived: m(\d+)\]$")


def handle(position: int) -> str:
    return f"m{position}"


def parse_handles(text: str, limit: int = 64) -> list[int] | None:
    """The positions a handle (`m12`) or a range (`m12-m15`) names; None when it is neither."""
    text = text.strip()
    single = _HANDLE.match(text)
    if single:
        return [int(single.group(1))]
    span = _RANGE.match(text)
    if not span:
        return None
    low, high = sorted((int(span.group(1)), int(span.group(2))))
    return list(range(low, min(high, low + limit - 1) + 1))


def ranges(positions: Iterable[int]) -> str:
    """`m2-m5, m9` for positions 2, 3, 4, 5 and 9."""
    spans: list[list[int]] = []
    for position in sorted(set(positions)):
        if spans and position == spans[-1][1] + 1:
            spans[-1][1] = position
        else:
            spans.append([position, position])
    return ", ".join(
        handle(low) if low == high else f"{handle(low)}-{handle(high)}" for low, high in spans
    )


def archive_line(positions: Sequence[int]) -> str:
    return (
        f"{ARCHIVE_OPEN}{ranges(positions)} — the exact text of every compacted message; "
        f"call the {RECALL_TOOL} tool with a handle to read one, or with a query to search them.]\n"
    )


def rewritten_suffix(position: int) -> str:
    # Short: a compacted view may hold hundreds of one-liners; the summary's line and the
    # tool's description say what a handle is.
    return f"\n[archived: {handle(position)}]"


def without_archive_line(text: str) -> str:
    """Summary text without the archive line (it is rewritten after every compression)."""
    return ARCHIVE_LINE.sub("", text, count=1)


def with_handles(
    result: Sequence[Message],
    sources: Sequence[int | None],
    replaced: Sequence[int],
    client: Sequence[Message],
) -> list[Message]:
    """`result` with the handles of what it replaced written into ctxgate's own messages.

    `sources[i]` is the client position `result[i]` holds verbatim (None: ctxgate wrote it),
    `replaced` the client positions the result no longer holds verbatim. A rewritten message
    (a one-liner, a clipped output) gets the handle of the original it stands for; the summary
    gets the ranges of everything replaced. Verbatim messages stay the same objects.
    """
    if not replaced:
        return list(result)
    pending = sorted(replaced)
    out = list(result)
    summary_at: int | None = None
    written: list[int] = []
    named: set[int] = set()
    for at, message in enumerate(out):
        if sources[at] is not None:
            continue
        if handoff_text(message) is not None:
            summary_at = at
            continue
        position = _original_of(message, pending, client)
        if position is not None:
            named.add(position)
            out[at] = _with_text(message, partial(_suffixed, position=position))
        written.append(at)
    if summary_at is not None:
        out[summary_at] = _with_text(
            out[summary_at], lambda text: _named_clips(_lined(text, pending), pending, client)
        )
    elif written and not named.issuperset(pending):
        # No summary to name the rest: the last message ctxgate wrote does.
        last = written[-1]
        out[last] = _with_text(out[last], lambda text: f"{_plain(text)}\n{archive_line(pending)}")
    return out


def _original_of(
    message: Message, replaced: Sequence[int], client: Sequence[Message]
) -> int | None:
    """The replaced client position a rewritten message stands for, when one matches."""
    call_ids = _call_ids(message)
    if call_ids:
        for position in reversed(replaced):
            original = client[position]
            if original.get("role") == message.get("role") and _call_ids(original) == call_ids:
                return position
        return None
    text = _plain(content_text(message)).strip()[:_LEAD]
    if not text:
        return None
    for position in reversed(replaced):
        original = client[position]
        if original.get("role") == message.get("role") and not _call_ids(original):
            if content_text(original).strip().startswith(text):
                return position
    return None


_LEAD = 60  # characters a clipped message keeps of its original's start, at least


def _call_ids(message: Message) -> tuple[str, ...]:
    if message.get("role") == "tool":
        return (str(message.get("tool_call_id") or ""),)
    return tuple(str(call.get("id") or "") for call in message.get("tool_calls") or [])


def _plain(text: str) -> str:
    """Text without the handles an earlier compression wrote into it."""
    return SUFFIX.sub("", ARCHIVE_LINE.sub("", text).rstrip("\n"))


def _suffixed(text: str, position: int) -> str:
    return _plain(text) + rewritten_suffix(position)


def _lined(text: str, positions: Sequence[int]) -> str:
    if not text.startswith(SUMMARY_PREFIX):
        return text
    body = without_archive_line(text[len(SUMMARY_PREFIX) :].lstrip("\n")).lstrip("\n")
    return f"{SUMMARY_PREFIX}\n{archive_line(positions)}\n{body}"


_CLIP_MARK = re.compile(r"\n…\[[\d,]+ chars omitted\]…\n")
_BLOCK = re.compile(re.escape(USER_OPEN) + r"\n(.*?)\n" + re.escape(USER_CLOSE), re.DOTALL)
_FILE_BLOCK = re.compile(
    "(" + re.escape(FILE_OPEN) + r"[^\n]*>>>\n)(.*?)(\n" + re.escape(FILE_CLOSE) + ")", re.DOTALL
)


def _named_clips(text: str, replaced: Sequence[int], client: Sequence[Message]) -> str:
    """The summary with the handle of its original written into each clipped user message or
    file read it carries, so the model can read the whole of it back."""

    def named_user(block: re.Match[str]) -> str:
        inner = block.group(1)
        position = _clipped_original(inner, replaced, client, ("user",))
        if position is None:
            return block.group(0)
        return f"{USER_OPEN}\n{inner}{rewritten_suffix(position)}\n{USER_CLOSE}"

    def named_file(block: re.Match[str]) -> str:
        inner = block.group(2)
        position = _clipped_original(inner, replaced, client, ("tool", "user"))
        if position is None:
            return block.group(0)
        return f"{block.group(1)}{inner}{rewritten_suffix(position)}{block.group(3)}"

    return _FILE_BLOCK.sub(named_file, _BLOCK.sub(named_user, text))


def _clipped_original(
    inner: str, replaced: Sequence[int], client: Sequence[Message], roles: tuple[str, ...]
) -> int | None:
    """The replaced client position a clipped block was cut from (None: not clipped, already
    named, or no original matches)."""
    mark = _CLIP_MARK.search(inner)
    head = inner[: mark.start()].strip()[:_LEAD] if mark is not None else ""
    if not head or SUFFIX.search(inner):
        return None
    for position in reversed(replaced):
        original = client[position]
        if original.get("role") not in roles:
            continue
        if roles == ("user",):
            # Messages may open alike (an agent's task template): the clip's whole head and
            # its tail tell which one it was cut from.
            if cut_from(inner, user_text(original)):
                return position
        elif content_text(original).strip().startswith(head):
            return position
    return None


def cut_from(clip: str, original: str) -> bool:
    """Whether `clip` (head, omission mark, tail; perhaps its handle) was cut from `original`."""
    mark = _CLIP_MARK.search(clip)
    if mark is None:
        return False
    head = clip[: mark.start()].strip()
    tail = SUFFIX.sub("", clip[mark.end() :]).strip()
    whole = original.strip()
    return bool(head) and whole.startswith(head) and whole.endswith(tail)


def clipped_originals(view: Sequence[Message], client: Sequence[Message]) -> dict[str, str]:
    """The whole text of each user message a handoff of `view` carries clipped, by the clip as
    the handoff holds it, read from the client's list at the position its handle names.

    The client resends every message with each request, while a compression sees only the
    view: without the original, each later handoff would read the clip back as the message
    and clip it further, so a task statement clipped once would stay clipped for good."""
    found: dict[str, str] = {}
    for message in view:
        text = handoff_text(message)
        parsed = parse_handoff(text) if text is not None and USER_OPEN in text else None
        if parsed is None:
            continue
        for inner in parsed.handoff.user_messages:
            named = SUFFIX.search(inner)
            if named is None:
                continue
            position = int(named.group(1))
            if position >= len(client) or client[position].get("role") != "user":
                continue
            original = user_text(client[position])
            if cut_from(inner, original):
                found[inner] = original
    return found


def _with_text(message: Message, edit: Callable[[str], str]) -> Message:
    """A copy of `message` whose text (a string, or its first text part) went through `edit`."""
    content: Any = message.get("content")
    copied = cast(Message, dict(message))
    if isinstance(content, str):
        copied["content"] = edit(content)
    elif isinstance(content, list):
        parts = list(content)
        for i, part in enumerate(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts[i] = cast(ContentPart, {**part, "text": edit(part["text"])})
                break
        else:
            parts.append(cast(ContentPart, {"type": "text", "text": edit("")}))
        copied["content"] = parts
    elif message.get("role") == "tool" or content is None:
        copied["content"] = edit("")
    return copied
