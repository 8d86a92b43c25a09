"""A large body is counted off the event loop's thread; a small one on it (the hop would
cost more than the count)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

from compression import Calibration, Message, ToolSchema
from session.pressure import LARGE_BODY_BYTES, measured
from session.turn import Turn


class ThreadNotingCounter:
    """Counts characters, and notes the thread each count ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None
    ) -> int:
        self.threads.append(threading.get_ident())
        return sum(len(str(m.get("content"))) for m in messages)

    def count_message(self, message: Message) -> int:
        return len(str(message.get("content")))

    def count_text(self, text: str) -> int:
        return len(text)


def turn_of(size: int) -> Turn:
    messages = [{"role": "user", "content": "x" * size}]
    request = SimpleNamespace(raw=b"x" * size, tools=None, messages=messages)
    view: Any = SimpleNamespace(
        request=request, view=messages, estimate=None, session=None, anchored=True
    )
    return cast(Turn, view)


def test_a_large_body_is_counted_off_the_loop() -> None:
    async def run() -> tuple[int, list[int]]:
        counter = ThreadNotingCounter()
        small = await measured(turn_of(1000), counter, Calibration())
        large = await measured(turn_of(LARGE_BODY_BYTES + 1), counter, Calibration())
        assert (small.tokens, large.tokens) == (1000, LARGE_BODY_BYTES + 1)
        return threading.get_ident(), counter.threads

    loop_thread, threads = asyncio.run(run())
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread


def test_a_large_first_seen_view_is_counted_through_the_offload() -> None:
    calls: list[str] = []

    async def offload(function: Any, *args: Any) -> Any:
        calls.append(function.__name__)
        return function(*args)

    async def run() -> tuple[int, int]:
        counter = ThreadNotingCounter()
        small = await measured(turn_of(1000), counter, Calibration(), offload)
        large = await measured(turn_of(LARGE_BODY_BYTES + 1), counter, Calibration(), offload)
        return small.tokens, large.tokens

    assert asyncio.run(run()) == (1000, LARGE_BODY_BYTES + 1)
    assert calls == ["count_piece"]  # the small body is counted on the loop
