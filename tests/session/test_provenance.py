"""Successive checkpoints archive every original they replace, exactly once (pure, no server).

The engine is played by Hypothesis: each compression keeps any subsequence of the view it is
given (verbatim, as the same objects) and writes any number of messages of its own; the
client resends its whole history plus new messages between compressions.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.messages.types import Message
from session.provenance import (
    aligned_sources,
    replaced_positions,
    replacement,
    view_sources,
)


def message(n: int) -> Message:
    return {"role": "user", "content": f"client message {n}"}


def written(n: int) -> Message:
    return {"role": "user", "content": f"written by ctxgate {n}"}


# One compression: how many client messages arrived before it, which view messages it keeps
# (a mask drawn against the view), and where it inserts messages of its own.
Round = tuple[int, list[bool], list[int]]
rounds = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=12),
        st.lists(st.booleans(), max_size=60),
        st.lists(st.integers(min_value=0, max_value=60), max_size=3),
    ),
    min_size=1,
    max_size=12,
)


def compress(view: list[Message], keep: list[bool], inserts: list[int], serial: int) -> list[Any]:
    result: list[Message] = [m for i, m in enumerate(view) if i < len(keep) and keep[i]]
    for n, at in enumerate(inserts):
        result.insert(min(at, len(result)), written(serial * 100 + n))
    return result


@settings(max_examples=300, deadline=None)
@given(rounds)
def test_successive_checkpoints_archive_each_replaced_original_once(plan: list[Round]) -> None:
    client: list[Message] = [message(0)]
    checkpoint: list[Message] = []  # the newest replacement
    sources: tuple[int | None, ...] = ()
    prefix_len = 0
    archived: list[int] = []
    for serial, (arrived, keep, inserts) in enumerate(plan):
        client = client + [message(len(client) + n) for n in range(arrived)]
        view = checkpoint + client[prefix_len:]
        origins = view_sources(sources, len(checkpoint), prefix_len, len(view))
        for at, position in enumerate(origins):
            if position is not None:
                assert view[at] is client[position]
        result = compress(view, keep, inserts, serial)
        done = replacement(view, result, origins)
        archived += done.archived
        checkpoint, sources, prefix_len = result, done.sources, len(client)
        for kept, position in zip(checkpoint, sources, strict=True):
            assert position is None or kept is client[position]
        # Exactly once, and nothing the newest checkpoint replaced is missing.
        assert len(archived) == len(set(archived))
        assert sorted(archived) == replaced_positions(prefix_len, sources)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=40),
    st.lists(st.booleans(), max_size=40),
    st.lists(st.integers(min_value=0, max_value=40), max_size=3),
)
def test_sources_of_a_replacement_stored_without_them_are_recovered(
    size: int, keep: list[bool], inserts: list[int]
) -> None:
    client = [message(n) for n in range(size)]
    # Copies, as a checkpoint read back from the database holds.
    result = [dict(m) for m in compress(client, keep, inserts, 7)]
    expected = replacement(client, compress(client, keep, [], 7), tuple(range(size))).sources
    recovered = [p for p in aligned_sources(result, client) if p is not None]
    assert recovered == [p for p in expected if p is not None]
