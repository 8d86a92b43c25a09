"""Small windows: the view still fits under the threshold, and the summary call fits its model."""

from __future__ import annotations

import pytest

from compression.compressor import Compressor
from compression.engine import SummaryCall, SummaryReply
from compression.invariants import check_invariants
from compression.types import Message
from tests.compression.builders import context, system, tool_round, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

ENGINE = Compressor()


class FittingSummarizer(ScriptedSummarizer):
    """Fails the test if a call would not fit the summary model's window."""

    def __init__(self, window: int) -> None:
        super().__init__(default="## Goal\nkeep going\n" + "- fact\n" * 400)
        self.window = window
        self.counter = CharCounter()

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        assert self.counter.count_messages(call.messages) + call.max_tokens <= self.window
        return await super().__call__(call)


def long_history(rounds: int, output_chars: int) -> list[Message]:
    messages: list[Message] = [
        system(),
        user("Refactor the payment module; keep Python 3.9 compatibility."),
    ]
    for step in range(rounds):
        messages += tool_round(
            f"c{step}",
            f"step {step} ok\n" * (output_chars // 12),
            command=f"pytest tests/test_{step}.py",
        )
    messages.append(user("What is left?"))
    return messages


@pytest.mark.parametrize("window", [2_048, 4_096, 8_192])
async def test_small_windows_compress_under_their_threshold(window: int) -> None:
    messages = long_history(rounds=80, output_chars=400)
    summarizer = FittingSummarizer(window)
    ctx = context(summarize=summarizer, context_length=window, max_output_tokens=256, now=1.0)
    out = await ENGINE.compress(messages, ctx)
    assert out.outcome == "compressed", out.error
    check_invariants(out.messages)
    threshold = ENGINE.limits(window, 256).threshold
    assert out.tokens_after < threshold
    assert CharCounter().count_messages(out.messages) < threshold
    assert len(summarizer.calls) == 1


async def test_a_small_summary_model_gets_a_fitted_input() -> None:
    messages = long_history(rounds=300, output_chars=1_200)
    summarizer = FittingSummarizer(4_096)
    ctx = context(
        summarize=summarizer,
        context_length=128_000,
        max_output_tokens=4_000,
        summary_context_length=4_096,
        force=True,
        now=1.0,
    )
    out = await ENGINE.compress(messages, ctx)
    assert out.outcome == "compressed"
    assert "summary input truncated" in summarizer.prompt or "TOOL RESULT]" in summarizer.prompt


async def test_a_huge_single_message_in_the_middle_is_clipped_for_the_summarizer() -> None:
    messages: list[Message] = [
        system(),
        user("first"),
        user("second"),
        user("third"),
        user("log:\n" + "noise line\n" * 40_000),
    ]
    for step in range(10):
        messages += tool_round(f"c{step}", "ok\n" * 300, command="true")
    messages.append(user("go on"))
    summarizer = FittingSummarizer(16_000)
    ctx = context(
        summarize=summarizer, context_length=16_000, max_output_tokens=1_000, force=True, now=1.0
    )
    out = await ENGINE.compress(messages, ctx)
    assert out.outcome == "compressed"
    assert "chars omitted" in summarizer.prompt
