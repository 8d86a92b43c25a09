"""Where each message of a view came from, and which client originals a compression replaces
(pure).

A view is a checkpoint's replacement followed by the client messages after its prefix. Each
message either holds a client message verbatim (its position in the client's list) or was
written by ctxgate (a summary, a one-liner, a restatement: no position). A checkpoint stores
these sources with its replacement, so the next compression knows the client position of every
message it drops, including those an earlier checkpoint kept verbatim in its tail.

    compression k replaces  =  [0, prefix_len)  minus  positions its replacement keeps
    archived by k           =  positions of view messages the result does not keep

so the archive of successive checkpoints holds every replaced original exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compression import Message

Sources = tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Replacement:
    """What one compression did to the client's positions."""

    archived: tuple[int, ...]  # client positions the result no longer holds verbatim
    sources: Sources  # for each result message, the client position it holds verbatim


def view_sources(
    replacement: Sources, replacement_len: int, prefix_len: int, view_len: int
) -> Sources:
    """For each view message, the client position it holds verbatim (None: ctxgate's own)."""
    head = tuple(replacement[:replacement_len]) + (None,) * (replacement_len - len(replacement))
    return head + tuple(range(prefix_len, prefix_len + view_len - replacement_len))


def replacement(
    view: Sequence[Message], result: Sequence[Message], origins: Sources
) -> Replacement:
    """The originals `result` drops from `view`, and the sources of `result`.

    A message is kept when the result holds the very same object: an engine that rewrites a
    message (a one-liner, a clipped output, a sanitized call) makes a new one, and the original
    is archived.
    """
    index = {id(message): i for i, message in enumerate(view)}
    kept: set[int] = set()
    sources: list[int | None] = []
    for message in result:
        at = index.get(id(message))
        if at is None:
            sources.append(None)
            continue
        kept.add(at)
        sources.append(origins[at])
    archived = tuple(
        position for at, position in enumerate(origins) if position is not None and at not in kept
    )
    return Replacement(archived, tuple(sources))


def aligned_sources(replacement: Sequence[Message], client: Sequence[Message]) -> Sources:
    """Sources of a replacement stored without them, by matching its messages to the client's
    prefix from the end (a checkpoint keeps its verbatim messages in their order)."""
    out: list[int | None] = [None] * len(replacement)
    below = len(client)
    for at in range(len(replacement) - 1, -1, -1):
        position = below - 1
        while position >= 0 and client[position] != replacement[at]:
            position -= 1
        if position >= 0:
            out[at] = position
            below = position
    return tuple(out)


def replaced_positions(prefix_len: int, sources: Sequence[int | None]) -> list[int]:
    """Client positions a checkpoint of `prefix_len` messages with these sources replaces."""
    kept = {position for position in sources if position is not None}
    return [position for position in range(prefix_len) if position not in kept]
