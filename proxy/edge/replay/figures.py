"""What one replayed session came to, with and without ctxgate (pure).

Without ctxgate each request goes to the provider as the agent sent it; with ctxgate the
provider gets what ctxgate forwarded, plus ctxgate's summary calls. Both are billed in cache
tiers (`meter.py`), at the model's price. Output is left out: both sides get the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compression import FileOp
from session.config.prices import Price
from session.ledger.tiers import Split, cost


@dataclass(frozen=True, slots=True)
class RequestFigures:
    original: int  # prompt tokens of the request as the agent sent it
    forwarded: int | None  # of what ctxgate sent upstream; None: ctxgate answered an error
    direct: Split  # billed without ctxgate
    billed: Split  # billed with ctxgate (nothing when it answered an error)
    users: int  # the agent's user messages in the request
    users_in_view: int  # of them, those whose text ctxgate forwarded
    error: str | None = None


@dataclass(slots=True)
class SessionFigures:
    name: str
    source: str
    api: str
    model: str
    window: int
    price: Price | None
    requests: list[RequestFigures] = field(default_factory=list)
    summaries: list[Split] = field(default_factory=list)  # ctxgate's summary calls, billed
    compressions: list[tuple[str, str]] = field(default_factory=list)  # (trigger, outcome)
    edits_kept: int = 0  # edits whose newest read of the file was in view
    edits: int = 0  # edits with an earlier read to look for
    seconds: float = 0.0

    @property
    def without(self) -> Split:
        return sum((r.direct for r in self.requests), Split())

    @property
    def with_ctxgate(self) -> Split:
        billed = sum((r.billed for r in self.requests), Split())
        return sum(self.summaries, billed)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.requests if r.error is not None)

    @property
    def over_window(self) -> tuple[int, int]:
        """(requests over the window as sent, as forwarded)."""
        sent = sum(1 for r in self.requests if r.original > self.window)
        forwarded = sum(1 for r in self.requests if (r.forwarded or 0) > self.window)
        return sent, forwarded

    def usd(self, split: Split) -> float | None:
        return None if self.price is None else cost(split, self.price)

    @property
    def users_in_view(self) -> tuple[int, int]:
        return sum(r.users_in_view for r in self.requests), sum(r.users for r in self.requests)


def answered_edits(ops: Sequence[FileOp], start: int, end: int) -> list[tuple[FileOp, FileOp]]:
    """(edit, newest read before it) for each edit the model made in the answer between
    messages `start` and `end` whose file it had read in a request before: an edit that writes
    the file whole, or one made after the agent wrote the file whole, needs no read."""
    found = []
    for edit in ops:
        if edit.kind != "edit" or edit.whole or not start <= edit.call < end:
            continue
        before = [op for op in ops if op.path == edit.path and op.call < edit.call]
        reads = [op for op in before if op.kind == "read" and op.result is not None]
        writes = [op.call for op in before if op.kind == "edit" and op.whole]
        reads = [op for op in reads if op.result is not None and op.result < start]
        if not reads or (writes and max(writes) > reads[-1].call):
            continue
        found.append((edit, reads[-1]))
    return found
