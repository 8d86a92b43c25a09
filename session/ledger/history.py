"""A request's client messages as the ledger links them to the session's next request.

A compressed request's uncompressed prompt is anchored on the session's previous request when
its messages continue that one's: the previous request's `History.prefix` is compared with the
same prefix of this one. Only a compressed request asks, so the digests are taken when first
asked for: hashing a request's messages costs about 4 µs a message (200 µs for an 8K-token
agent history no session has seen), the bulk of the ledger's work on a request forwarded as sent.

A request's `Tip` (its prefix digest, for the next request to compare) therefore holds the
messages until one asks, the next request of the session replaces it, or it can no longer be
asked: the previous request is only an anchor while the provider's cache holds its prompt
(`CACHE_TTL_S`). `Tips` keeps the undigested ones within a byte budget, digesting the oldest
past it (without putting their messages in the seen-messages memo, which would hold them in
its place), and lets go of those too old to be asked (with an hour's margin for a request still
in flight that started in time). The figures are those of digesting every request at once.

May import: compression (the face), session.ledger.tiers.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from compression import Message, seen_messages
from session.ledger.tiers import CACHE_TTL_S

# Bytes of request bodies whose messages the undigested tips may hold. Parsed messages take a few
# times their JSON's bytes, so a quarter of the seen-messages memo's own 64 MB (which would
# otherwise hold these messages with their digests): about 500 agents' 8K-token histories.
HELD_BYTES = 16 * 1024 * 1024
# How long after its request a tip can still be asked: a later request of the session that
# started within the cache's lifetime may still be in flight (a long stream) for a while.
ASKED_WITHIN_S = CACHE_TTL_S + 3600.0


class History:
    """The client's messages of a request: `digests[i]` is the digest of message i
    (`message_digest`), taken on first use, and `grown(n)` the (billed-scale) tokens of the
    messages after the first `n`; `size`: the request body's bytes."""

    __slots__ = ("_digests", "grown", "messages", "size")

    def __init__(
        self, messages: Sequence[Message], grown: Callable[[int], int], size: int = 0
    ) -> None:
        self.messages = messages
        self.grown = grown
        self.size = size
        self._digests: Sequence[str] | None = None

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def digests(self) -> Sequence[str]:
        if self._digests is None:
            self._digests = seen_messages().digests(self.messages)
        return self._digests

    @property
    def digested(self) -> bool:
        return self._digests is not None

    def digest_now(self) -> None:
        """Take the digests now (off the event loop, for a large body)."""
        _ = self.digests

    def prefix(self, n: int) -> str:
        """One digest of the first `n` messages: of their digests, in order. A single hash
        of 64 bytes a message, where a chain of digests costs one hash a message (2.6 ms
        for the 3,900 messages of a 200K-token history no session has seen)."""
        return _joined(self.digests[:n])

    def whole_unkept(self, recent: dict[int, tuple[Any, str]] | None = None) -> str:
        """`prefix(len(self))`, its messages' digests kept in the seen-messages memo only if
        taken already: for a link digested only to let go of its messages (past the budget),
        which the memo would otherwise hold on to in their place (`recent`: see
        `SeenMessages.digests_unkept`)."""
        if self._digests is not None:
            return _joined(self._digests)
        return _joined(seen_messages().digests_unkept(self.messages, recent))


def _joined(digests: Sequence[str]) -> str:
    return hashlib.sha256("".join(digests).encode("ascii")).hexdigest()


class Tip:
    """`History.prefix` of all of a request's messages, taken when first asked for."""

    __slots__ = ("_digest", "_history", "_owner", "at", "size")

    def __init__(self, history: History, at: float, size: int) -> None:
        self.at = at
        self.size = size  # the request body's bytes, charged to the budget while held
        self._history: History | None = history
        self._digest: str | None = None
        self._owner: Tips | None = None  # the budget it is charged to while held

    @property
    def held(self) -> bool:
        """Whether it still holds its messages undigested."""
        return self._history is not None

    def digest(self) -> str | None:
        """The prefix digest; None where it was let go undigested (no request can ask)."""
        if self._history is not None:
            self._digest = self._history.prefix(len(self._history))
            self._release()
        return self._digest

    def let_go(self) -> None:
        self._release()

    def settle(self, recent: dict[int, tuple[Any, str]] | None = None) -> None:
        """Take the digest now and let go of the messages (past the budget): the same digest
        `digest` takes, without keeping the messages in the seen-messages memo."""
        if self._history is not None:
            self._digest = self._history.whole_unkept(recent)
            self._release()

    def _release(self) -> None:
        """Its messages let go, and their bytes given back to the budget that held them, however
        it ended (asked by the next request, replaced, too old, past the budget)."""
        if self._history is not None and self._owner is not None:
            self._owner._bytes -= self.size
        self._history = None
        self._owner = None


class Tips:
    """The undigested tips, oldest first, within `budget` bytes."""

    def __init__(self, budget: int = HELD_BYTES, asked_within_s: float = ASKED_WITHIN_S) -> None:
        self.budget = budget
        self.asked_within_s = asked_within_s
        self._order: deque[Tip] = deque()
        self._bytes = 0
        # The messages of the tip last digested past the budget, with their digests: the
        # next one, often another session of the same agent, shares most of them.
        self._settled: dict[int, tuple[Any, str]] = {}

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def hold(self, tip: Tip, now: float) -> None:
        """Hold `tip` undigested; digest or let go of older ones past the budget or too old
        to be asked (`now`: the newest request's start)."""
        if tip.held:
            self._order.append(tip)
            self._bytes += tip.size
            tip._owner = self
        order = self._order
        while order:
            oldest = order[0]
            if oldest.held:
                if now - oldest.at > self.asked_within_s:
                    oldest.let_go()
                elif self._bytes > self.budget:
                    oldest.settle(self._settled)
                else:
                    return
            order.popleft()

    def let_go(self, tip: Tip) -> None:
        """`tip` can no longer be asked (its session's next request replaced it, or the
        session was forgotten)."""
        tip.let_go()
