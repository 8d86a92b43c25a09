"""Small windows: the view still fits under the threshold, and the summary call fits its model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.counting.calibration import Calibration
from compression.engine import SummaryCall, SummaryCallError, SummaryReply
from compression.messages.types import Message
from compression.state import EngineState
from tests.compression.builders import context, system, tool_round, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

ENGINE = Compressor()


class FittingSummarizer(ScriptedSummarizer):
    """A summary model whose tokenizer counts `factor` x CharCounter; refuses what overflows.

    Like a real server it reports the prompt size in its own tokens, and answers a call that
    does not fit its window with an error (the engine then falls back: outcome "fallback").
    """

    def __init__(self, window: int, factor: float = 1.0) -> None:
        super().__init__(default="## Goal\nkeep going\n" + "- fact\n" * 400)
        self.window = window
        self.factor = factor
        self.counter = CharCounter()
        self.sizes: list[int] = []

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        prompt = int(self.counter.count_messages(call.messages) * self.factor)
        self.sizes.append(prompt + call.max_tokens)
        if prompt + call.max_tokens > self.window:
            raise SummaryCallError("context window exceeded", status=400)
        reply = await super().__call__(call)
        return replace(reply, prompt_tokens=prompt)


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


def summary_pass(
    summarizer: FittingSummarizer, state: EngineState | None = None, ratio: float | None = None
) -> Any:
    messages = long_history(rounds=80, output_chars=400)
    ctx = context(
        summarize=summarizer,
        context_length=2_048,
        max_output_tokens=48,
        summary_token_ratio=ratio,
        state=state,
        force=True,
        now=1.0,
    )
    return ENGINE.compress(messages, ctx)


async def test_an_unknown_summary_tokenizer_gets_a_safety_margin() -> None:
    """llama-family tokenizers count ~1.21x ours: the margin alone keeps the call in."""
    summarizer = FittingSummarizer(2_048, factor=1.21)
    out = await summary_pass(summarizer)
    assert out.outcome == "compressed", out.error
    assert summarizer.sizes[0] <= 2_048


async def test_the_summary_models_ratio_sizes_its_input() -> None:
    heavy = FittingSummarizer(2_048, factor=1.7)
    unknown = await summary_pass(heavy)
    assert unknown.outcome == "fallback" and heavy.sizes[0] > 2_048  # the margin is not enough
    known = FittingSummarizer(2_048, factor=1.7)
    out = await summary_pass(known, ratio=1.7)
    assert out.outcome == "compressed", out.error
    assert known.sizes[0] <= 2_048


async def test_the_summary_models_ratio_is_learned_from_its_replies() -> None:
    first = FittingSummarizer(2_048, factor=1.7)
    out = await summary_pass(first, ratio=1.7)
    learned = Calibration.from_dict(out.state.summary_calibration)
    assert learned.samples == 1 and learned.ratio == pytest.approx(1.7, abs=0.02)
    again = FittingSummarizer(2_048, factor=1.7)
    later = await summary_pass(again, state=EngineState(summary_calibration=learned.to_dict()))
    assert later.outcome == "compressed", later.error
    assert again.sizes[0] <= 2_048
    assert EngineState.from_json(later.state.to_json()) == later.state
