"""Session kinds, and whether the file an agent edits was still in view when it edited.

An edit's old text must match the file. For each edit a coding session makes (found by
`compression.verbatim.fileops` on the ORIGINAL history), the request the model answered with that
edit is the one to look at: was the newest read of the file (its result, verbatim) forwarded in it?
If not, the model had to rebuild the file from memory or recall it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from bench.evaluation.artifacts import view_text
from bench.evaluation.corpus import Session
from bench.evaluation.replay import Turn
from compression import FileOp, Message, content_text, file_ops

Fraction = tuple[int, int]  # (kept, total)

CODING = "coding agent"
SERVICE = "chat or tool service"
# SWE-agent text and function-calling, mini-swe-agent (in swe-text), OpenCode and aider (agents)
ONE_TASK_CODING = "one-task coding agent"
GROUPS: dict[str, str] = {
    "swe-text": CODING,
    "swe-fc": CODING,
    "agents": CODING,
    "tau": SERVICE,
    "task-swe-text": ONE_TASK_CODING,
    "task-swe-fc": ONE_TASK_CODING,
}
CODING_GROUPS = (CODING, ONE_TASK_CODING)


def group_of(kind: str) -> str:
    return GROUPS.get(kind, kind)


def edit_reads(session: Session, turns: Sequence[Turn]) -> Fraction:
    """(edits whose newest earlier read was verbatim in the request that preceded them, edits
    with such a read). An edit with no earlier read, one that writes the file whole, one made
    after the agent wrote the file whole (its text is the write, not a read), or one whose
    request was not answered, is not counted."""
    if group_of(session.kind) not in CODING_GROUPS:
        return 0, 0
    ops = file_ops(cast(list[Message], session.messages))
    answered = {t.end: t for t in turns if t.forwarded is not None}
    points = session.points()
    kept = counted = 0
    for edit in (op for op in ops if op.kind == "edit" and not op.whole):
        if _rewritten_since_read(ops, edit):
            continue  # the file's text is what the agent wrote, not what it read
        turn = answered.get(_request_before(points, edit.call))
        read = _newest_read(session, ops, edit, turn.end) if turn is not None else None
        if turn is None or turn.forwarded is None or read is None:
            continue
        counted += 1
        kept += read in view_text(turn.forwarded.messages)
    return kept, counted


def _rewritten_since_read(ops: Sequence[FileOp], edit: FileOp) -> bool:
    """Whether the agent wrote the file whole after its newest read before `edit`."""
    before = [op for op in ops if op.path == edit.path and op.call < edit.call]
    reads = [op.call for op in before if op.kind == "read"]
    writes = [op.call for op in before if op.kind == "edit" and op.whole]
    return bool(writes) and (not reads or max(writes) > max(reads))


def edits_of(session: Session) -> int:
    """Every edit the session makes (coding sessions only), counted or not."""
    if group_of(session.kind) not in CODING_GROUPS:
        return 0
    ops = file_ops(cast(list[Message], session.messages))
    return sum(1 for op in ops if op.kind == "edit")


def _request_before(points: Sequence[int], call: int) -> int:
    """The end of the request the model answered with message `call` (the newest request
    ending at or before it); -1 when there is none."""
    return max((end for end in points if end <= call), default=-1)


def _newest_read(session: Session, ops: Sequence[FileOp], edit: FileOp, end: int) -> str | None:
    """The text of the newest read of the edited file whose result the request held (None
    when there is none, or it came back empty: nothing to keep in view)."""
    reads = [
        op
        for op in ops
        if op.kind == "read"
        and op.path == edit.path
        and op.call < edit.call
        and op.result is not None
        and op.result < end
    ]
    if not reads or reads[-1].result is None:
        return None
    text = content_text(cast(Message, session.messages[reads[-1].result]))
    return text if text.strip() else None
