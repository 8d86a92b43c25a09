"""At a small window, where the provider counts a third more tokens than ctxgate: the plan aims
under the threshold in the provider's tokens, and what is carried verbatim yields when nothing
else is left to shrink (the handoff's copy of the user's words is clipped, with its handle), so
that a forced pass fits instead of failing the request it was made for."""

from __future__ import annotations

import pytest

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.messages.types import Message
from tests.compression.builders import context, reply, system, tool_round, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

ENGINE = Compressor()
RATIO = 1.33  # the provider's tokens per token ctxgate counts
INSTRUCTION = "Instruction: never edit files under third_party/, and keep the -Werror flag on."


def wordy_history(steps: int, words_chars: int) -> list[Message]:
    """A build session whose user keeps writing: every step a user message of its own."""
    rules = "You are a build agent for /srv/engine. " + "Report exact file names. " * 30
    messages: list[Message] = [system(rules), user("Fix the release build. " + INSTRUCTION)]
    for step in range(steps):
        log = "\n".join(
            f"[{step:3d}%] Building CXX object src/u{step}_{n}.cpp.o" for n in range(12)
        )
        messages += tool_round(f"c{step}", log, command=f"make step{step}")
        messages.append(reply(f"Step {step} built; warnings remain."))
        words = f"Step {step}: look at unit {step} first, then " + "the linker flags " * 40
        messages.append(user(words[:words_chars]))
    return messages


@pytest.mark.parametrize("words_chars", [400, 700, 1500])
async def test_carried_words_yield_so_a_forced_pass_fits(words_chars: int) -> None:
    messages = wordy_history(steps=14, words_chars=words_chars)
    summarizer = ScriptedSummarizer(default="## Goal\nfix the build\n")
    # The provider's count of the refused prompt, as an overflow error states it.
    refused = int(CharCounter().count_messages(messages) * RATIO)
    ctx = context(
        summarize=summarizer,
        context_length=2_048,
        max_output_tokens=24,
        force=True,
        current_tokens=refused,
        now=1.0,
    )
    out = await ENGINE.compress(messages, ctx)
    assert out.outcome == "compressed", out.error
    check_invariants(out.messages)
    threshold = ENGINE.limits(2_048, 24).threshold
    # In the provider's tokens, the compressed view is under the threshold.
    assert CharCounter().count_messages(out.messages) * RATIO < threshold
    assert out.tokens_after < threshold
    assert INSTRUCTION in str(out.messages)


async def test_when_the_tail_alone_fills_the_window_the_carried_words_yield() -> None:
    """The newest build log is long and stays verbatim (the tail's floor): at the most
    aggressive cut the view is still over, so the user's words carried in the handoff are
    clipped to make it fit (without this, a forced pass sends a view the provider refuses
    again)."""
    messages = wordy_history(steps=14, words_chars=1500)
    long_log = "\n".join(f"[ 99%] Linking CXX shared library lib/part_{n}.so" for n in range(30))
    messages += tool_round("c-final", long_log, command="make all")
    refused = int(CharCounter().count_messages(messages) * RATIO)
    ctx = context(
        summarize=ScriptedSummarizer(default="## Goal\nfix the build\n"),
        context_length=2_048,
        max_output_tokens=24,
        force=True,
        current_tokens=refused,
        now=1.0,
    )
    out = await ENGINE.compress(messages, ctx)
    assert out.outcome == "compressed", out.error
    check_invariants(out.messages)
    threshold = ENGINE.limits(2_048, 24).threshold
    assert out.tokens_after < threshold
    assert any(m.get("content") == long_log for m in out.messages)  # the newest result, whole
    assert out.clipped, "no carried message was clipped"
