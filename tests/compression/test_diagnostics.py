"""What a refused compression says: figures in one unit, and the one case no compression can
help (the system prompt and tools alone fill the window) named as such."""

from __future__ import annotations

import re

from compression.compressor import Compressor
from compression.messages.types import ToolSchema
from compression.state import EngineState
from tests.compression.builders import agent_session, context, system, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

NOW = 1_000_000.0


def figures(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


async def test_a_rejection_compares_calibrated_tokens_with_the_limit() -> None:
    messages = agent_session(rounds=8, asks=1)
    messages[-1] = user("Now run the suite. " + "x" * 44_000)  # must stay verbatim
    real = 2 * CharCounter().count_messages(messages, None)  # the provider counts twice ours
    out = await Compressor().compress(
        messages,
        context(
            summarize=ScriptedSummarizer(),
            now=NOW,
            context_length=16_000,
            current_tokens=real,
            state=EngineState(strikes=2),
        ),
    )
    assert out.outcome == "rejected"
    assert "must stay verbatim" in (out.error or "")
    verbatim, limit = figures(out.error or "")
    assert verbatim >= limit  # both in the provider's tokens: the claim holds as printed


async def test_a_system_prompt_over_the_window_is_named_in_the_error() -> None:
    messages = [system("rules " * 9_000), user("hello"), user("and again")]
    summarizer = ScriptedSummarizer()
    out = await Compressor().compress(
        messages,
        context(
            summarize=summarizer,
            now=NOW,
            context_length=8_000,
            max_output_tokens=1_000,
            force=True,
            trigger="overflow",
        ),
    )
    assert out.outcome == "rejected"
    error = out.error or ""
    assert "system prompt and tool definitions alone take" in error
    assert "7,000 tokens the model's window leaves for the prompt" in error
    assert "(8,000 less 1,000 reserved for output)" in error
    assert summarizer.calls == []  # no summary is paid for a request that cannot fit


async def test_tool_definitions_count_toward_the_fixed_part() -> None:
    tools: list[ToolSchema] = [
        {
            "type": "function",
            "function": {"name": f"tool_{i}", "description": "d" * 2_000, "parameters": {}},
        }
        for i in range(20)
    ]
    out = await Compressor().compress(
        [system(), user("hi"), user("again")],
        context(now=NOW, context_length=8_000, force=True, trigger="overflow", tools=tools),
    )
    assert out.outcome == "rejected"
    assert "system prompt and tool definitions alone" in (out.error or "")


async def test_a_fixed_part_that_fits_is_no_obstacle() -> None:
    out = await Compressor().compress(
        agent_session(rounds=6),
        context(summarize=ScriptedSummarizer(), now=NOW, force=True, trigger="overflow"),
    )
    assert out.outcome == "compressed"
