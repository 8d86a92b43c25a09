"""User messages carried verbatim inside the summary, so the user's own words survive.

Candidates are the real user messages of the summarized region plus those an earlier summary
in the region already carried; the newest are chosen first within a count and token bound
(the original request keeps a reserved place), then emitted oldest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compression.handoff import handoff_text, parse_handoff, user_text
from compression.ledger import Ledger
from compression.types import Message


@dataclass(frozen=True, slots=True)
class Carried:
    text: str
    tokens: int | None = None  # known size (an upper bound), when counted already


def carry_candidates(
    messages: Sequence[Message], start: int, end: int, skip: int | None, ledger: Ledger
) -> list[Carried]:
    """Oldest first. `skip` is the newest user message when it is restated separately."""
    found: list[Carried] = []
    for index in range(start, end):
        message = messages[index]
        summary = handoff_text(message)
        if summary is not None:
            parsed = parse_handoff(summary)
            if parsed is not None:
                found.extend(Carried(text) for text in parsed.handoff.user_messages)
        if index == skip or message.get("role") != "user":
            continue
        text = user_text(message)
        if text.strip():
            known = ledger.tokens[index] if summary is None else None
            found.append(Carried(text, known))
    return found


def select_carried(
    candidates: Sequence[Carried], max_count: int, max_tokens: int, count: Callable[[str], int]
) -> tuple[str, ...]:
    """Newest first within the bounds, emitted oldest first.

    The oldest candidate (the session's original request, carried forward by every summary)
    keeps a reserved place when it fits in half the budget: it is where the task and its
    constraints were stated, and newest-first alone would drop it first.
    """
    if max_count <= 0 or max_tokens <= 0 or not candidates:
        return ()
    first: tuple[str, ...] = ()
    remaining = max_tokens
    origin = candidates[0]
    origin_size = _size(origin, count)
    if max_count > 1 and origin_size <= max_tokens // 2:
        first, remaining = (origin.text,), max_tokens - origin_size
        candidates = candidates[1:]
    chosen: list[str] = []
    for candidate in reversed(candidates):
        if len(chosen) + len(first) >= max_count or remaining <= 0:
            break
        if candidate.text in chosen or candidate.text in first:
            continue
        size = _size(candidate, count)
        if size <= remaining:
            chosen.append(candidate.text)
            remaining -= size
    return first + tuple(reversed(chosen))


def _size(candidate: Carried, count: Callable[[str], int]) -> int:
    return candidate.tokens if candidate.tokens is not None else count(candidate.text)
