"""A large history's count: the messages this process has seen are not counted again, the
new ones are tokenized in pieces of about equal size across the pool's workers, and the total
is the plain count."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compression import Message, counter_for_model
from compression.messages.digest import message_digests
from session.pool import EnginePool
from session.pressure import PIECE_CHARS, counted, split


def history(n: int, tag: str) -> list[Message]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"{tag} {i} " + "word " * (i % 400)}
        for i in range(n)
    ]


@given(st.lists(st.integers(0, 50_000), max_size=40), st.integers(1, 6))
def test_pieces_are_consecutive_balanced_runs(sizes: list[int], pieces: int) -> None:
    messages: list[Message] = [{"role": "user", "content": "x" * n} for n in sizes]
    parts = split(messages, pieces)
    assert [m for part in parts for m in part] == messages
    assert len(parts) <= max(1, pieces)
    assert all(parts) or parts == [messages]
    if len(parts) > 1:
        share = sum(sizes) / len(parts)
        assert share >= PIECE_CHARS
        assert all(sum(len(str(m["content"])) for m in p) <= share + 50_000 for p in parts)


def test_a_new_history_is_counted_in_pieces_across_the_pool() -> None:
    counter = counter_for_model("gpt-4o")
    sent: list[tuple[int, int]] = []  # (worker pid, messages) of each piece

    async def run() -> tuple[list[int], list[int], list[int]]:
        pool = EnginePool(2)
        pool.start()
        try:

            async def offload(function: Any, *args: Any) -> Any:
                pid = await pool.call(os.getpid)
                sent.append((pid, len(args[1])))
                return await pool.call(function, *args)

            first = history(400, "first-seen")
            whole = await counted(counter, first, offload, pieces=2)
            pieces_of_first = list(sent)
            grown = [*first, *history(3, "grown")]
            again = await counted(counter, grown, offload, pieces=2)
            return whole, again, [n for _, n in pieces_of_first]
        finally:
            pool.close()

    whole, again, pieces = asyncio.run(run())
    first, grown = history(400, "first-seen"), history(3, "grown")
    assert whole == [counter.count_message(m) for m in first]
    assert again == whole + [counter.count_message(m) for m in grown]
    assert sorted(pieces) != [400] and sum(pieces) == 400  # two pieces...
    assert len({pid for pid, _ in sent[:2]} - {os.getpid()}) >= 1  # ...in the workers
    assert sent[2:] == []  # the grown history's new messages: too few for the pool


def test_a_seen_history_goes_nowhere() -> None:
    counter = counter_for_model("gpt-4o")
    calls: list[Sequence[Message]] = []

    async def offload(function: Any, *args: Any) -> Any:
        calls.append(args[1])
        return function(*args)

    messages = history(400, "seen")
    assert asyncio.run(counted(counter, messages, offload)) == [
        counter.count_message(m) for m in messages
    ]
    assert len(calls) == 1
    assert asyncio.run(counted(counter, messages, offload)) == [
        counter.count_message(m) for m in messages
    ]
    assert len(calls) == 1  # found: nothing sent
    small = history(5, "small")
    assert asyncio.run(counted(counter, small, offload)) == [
        counter.count_message(m) for m in small
    ]
    assert len(calls) == 1  # counted here: under a piece's size


def test_each_piece_goes_with_its_messages_digests() -> None:
    """A worker keys its counts by the digests the memo worked out: it does not hash the
    messages again, and the digests are each piece's own."""
    counter = counter_for_model("gpt-4o")
    pieces: list[tuple[Sequence[Message], Sequence[str]]] = []

    async def offload(function: Any, *args: Any) -> Any:
        pieces.append((args[1], args[2]))
        return function(*args)

    messages = history(400, "keyed")
    counts = asyncio.run(counted(counter, messages, offload, pieces=3))
    assert counts == [counter.count_message(m) for m in messages]
    assert len(pieces) > 1
    assert [m for piece, _ in pieces for m in piece] == messages
    assert all(list(digests) == message_digests(piece) for piece, digests in pieces)
