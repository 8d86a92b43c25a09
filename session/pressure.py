"""How full a request's view is (pure; `measured` counts a large body in a thread).

The anchor is the real `prompt_tokens` the upstream reported for the session's previous view;
the figure for a new request is that anchor plus an estimate of what was appended since. Only
when there is no usable anchor is the whole view estimated (per-message counts are cached).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compression import (
    Calibration,
    Limits,
    Message,
    TokenCounter,
    count_each,
    seen_messages,
)
from session.ports.frontdoor import IMAGE_MARK
from session.turn import Turn

IMAGE_TOKENS = 765
# A body past this many bytes is counted in a thread: tiktoken lets go of the GIL while it
# encodes and the rest yields it every switch interval, so other sessions' requests are not
# held up for the whole count (about a second for 3 MB). A smaller one costs less than the hop.
LARGE_BODY_BYTES = 256 * 1024
# The least text a piece of a count is sent to a pool worker with: under it, the hop (pickled
# both ways) costs more than the worker saves.
PIECE_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class Pressure:
    tokens: int
    exact: bool  # anchored on a real figure rather than a pure estimate
    estimate: int | None = None  # the whole view's estimate, when it had to be computed


def upper_bound(turn: Turn) -> int:
    """A cheap bound on the request's tokens: a BPE token is never shorter than a byte.

    Images are the exception (a short URL costs hundreds of tokens), so each adds its flat cost.
    """
    request = turn.request
    marks = request.image_marks
    if marks is None:
        marks = request.raw.count(IMAGE_MARK)
    return len(request.raw) + IMAGE_TOKENS * marks


def estimate_view(turn: Turn, counter: TokenCounter, calibration: Calibration) -> int:
    if turn.estimate is not None:
        return turn.estimate
    # Each message object is counted once for every request that holds it.
    return calibration.apply(seen_messages().count_messages(counter, turn.view, turn.request.tools))


def surely_small(turn: Turn, limits: Limits) -> bool:
    """The client's untouched request is far under every line, without counting a token."""
    if turn.view is not turn.request.messages:
        return False
    return upper_bound(turn) < min(limits.threshold, limits.hygiene_tokens)


Offload = Callable[..., Awaitable[Any]]


async def measured(
    turn: Turn,
    counter: TokenCounter,
    calibration: Calibration,
    offload: Offload | None = None,
    pieces: int = 1,
) -> Pressure:
    """`measure`; for a large body, off the loop: a whole view's count through `offload(fn,
    *args)` (a process pool's call: no share of this process's GIL; see `counted`), the rest
    in a thread."""
    if len(turn.request.raw) <= LARGE_BODY_BYTES:
        return measure(turn, counter, calibration)
    if offload is None or _anchored(turn) or turn.estimate is not None:
        return await asyncio.to_thread(measure, turn, counter, calibration)
    view, tools = turn.view, turn.request.tools
    counts = await counted(counter, view, offload, pieces)
    estimate = calibration.apply(sum(counts) + counter.count_messages([], tools))
    return Pressure(estimate, False, estimate)


async def counted(
    counter: TokenCounter, messages: Sequence[Message], offload: Offload, pieces: int = 1
) -> list[int]:
    """Each message's tokens, found where this process saw the message (or its content)
    before, the rest tokenized through `offload` in up to `pieces` pieces of about equal
    bytes at once (one per pool worker): a history no session has seen costs the pool's
    time, not the loop's, and a long one is split over its workers."""
    known, missing = await asyncio.to_thread(_known, counter, messages)
    if not missing:
        return [n or 0 for n in known]
    new = [messages[i] for i in missing]
    # Each piece goes with its messages' digests (the counter's cache keys, hashed here as
    # the memo looked them up): a worker tokenizes, it does not hash them again.
    digests = await asyncio.to_thread(seen_messages().digests, new)
    runs, at = [], 0
    for piece in split(new, pieces):
        runs.append((piece, digests[at : at + len(piece)]))
        at += len(piece)
    parts = await asyncio.gather(*(offload(count_piece, counter, p, d) for p, d in runs))
    fresh = [n for part in parts for n in part]
    for i, n in zip(missing, fresh, strict=True):
        known[i] = n
    # Thousands of inserts: in a thread.
    await asyncio.to_thread(seen_messages().remember, counter, new, fresh)
    return [n or 0 for n in known]


def _known(
    counter: TokenCounter, messages: Sequence[Message]
) -> tuple[list[int | None], list[int]]:
    """The counts found, and the positions still to count; those already counted here when
    their text is under a piece's (a pool's round trip would cost more)."""
    seen = seen_messages()
    known = seen.counts(counter, messages)
    missing = [i for i, n in enumerate(known) if n is None]
    if missing and sum(_size(messages[i]) for i in missing) < PIECE_CHARS:
        # Counted with the digests the memo holds for them: each message hashed once.
        fresh = seen.count_each(counter, [messages[i] for i in missing])
        for i, n in zip(missing, fresh, strict=True):
            known[i] = n
        missing = []
    return known, missing


def split(messages: Sequence[Message], pieces: int) -> list[Sequence[Message]]:
    """`messages` in at most `pieces` consecutive runs of about equal size (by the length of
    their text), none empty nor under `PIECE_CHARS` but the only one."""
    if pieces <= 1 or len(messages) <= 1:
        return [messages]
    sizes = [_size(m) for m in messages]
    pieces = min(pieces, sum(sizes) // PIECE_CHARS)
    if pieces <= 1:
        return [messages]
    share = sum(sizes) / pieces
    out: list[Sequence[Message]] = []
    start, filled = 0, 0
    for i, size in enumerate(sizes):
        filled += size
        if filled >= share * (len(out) + 1) and len(out) < pieces - 1 and i + 1 < len(messages):
            out.append(messages[start : i + 1])
            start = i + 1
    out.append(messages[start:])
    return out


def _size(message: Message) -> int:
    content = message.get("content")
    return len(content) if isinstance(content, str) else len(str(message))


def count_piece(
    counter: TokenCounter, messages: Sequence[Message], digests: Sequence[str] | None = None
) -> list[int]:
    """Each message's tokens (module-level: a pool worker runs it by name); `digests`: the
    messages' own, when the caller has them."""
    return count_each(counter, messages, digests)


def _anchored(turn: Turn) -> bool:
    session = turn.session
    return (
        session is not None
        and turn.anchored
        and session.last_prompt_tokens is not None
        and session.last_prompt_tokens > 0
        and session.last_message_count is not None
        and 0 < session.last_message_count <= len(turn.view)
        and not session.last_usage_estimated
    )


def measure(turn: Turn, counter: TokenCounter, calibration: Calibration) -> Pressure:
    session = turn.session
    if _anchored(turn):
        assert session is not None and session.last_prompt_tokens is not None
        assert session.last_message_count is not None
        appended = turn.view[session.last_message_count :]
        extra = counter.count_messages(appended) - 3 if appended else 0
        return Pressure(session.last_prompt_tokens + calibration.apply(max(0, extra)), True)
    estimate = estimate_view(turn, counter, calibration)
    return Pressure(estimate, False, estimate)
