"""At a small window, where the provider counts a third more tokens than ctxgate: the plan aims
under the threshold in the provider's tokens, and what is carried verbatim yields when nothing
else is left to shrink (the handoff's copy of the user's words is clipped, with its handle), so
that a forced pass fits instead of failing the request it was made for."""

from __future__ import annotations

import pytest

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.engine import CompressionResult
from compression.messages.types import Message
from tests.compression.builders import context, reply, system, text_of, tool_round, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

ENGINE = Compressor()
RATIO = 1.33  # the provider's tokens per token ctxgate counts
INSTRUCTION = "Instruction: never edit files under third_party/, and keep the -Werror flag on."


def wordy_history(
    steps: int, words_chars: int, request: str = "Fix the release build. " + INSTRUCTION
) -> list[Message]:
    """A build session whose user keeps writing: every step a user message of its own."""
    rules = "You are a build agent for /srv/engine. " + "Report exact file names. " * 30
    messages: list[Message] = [system(rules), user(request)]
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


# A task statement as agents send it: what to do first, then pages of context.
TASK = (
    "We're fixing the release build of /srv/engine: the linker fails on lib/part_7.so with "
    "undefined symbols. Find the cause and fix it; do not silence the warning.\n"
    + "Issue context: the build matrix, the toolchain versions and earlier attempts. "
    * 30
)
SUMMARIZER = ScriptedSummarizer(default="## Goal\nfix the build\n")


def _log(lines: int, tag: str) -> str:
    return "\n".join(f"[{tag}] Linking CXX shared library lib/part_{n}.so" for n in range(lines))


SETTING = "SIGNING_KEY: key_7f3a9c2e41"


async def _forced_after_a_handoff(
    newest_log_lines: int,
) -> tuple[CompressionResult, CompressionResult]:
    """A compression at 4K, then a forced pass at 2K over the view it left (whose newest user
    message holds its handoff) with a newest log of `newest_log_lines` lines."""
    messages = wordy_history(steps=14, words_chars=600, request=TASK)
    messages.append(user("Now link the release build. " + "the flags " * 80))
    for step in range(8):
        log = _log(20, f"a{step}") + (f"\n{SETTING}" if step == 0 else "")
        messages += tool_round(f"a{step}", log, command=f"make part{step}")
    ctx = context(summarize=SUMMARIZER, context_length=4_096, max_output_tokens=24, now=1.0)
    first = await ENGINE.compress(messages, ctx)
    assert first.outcome == "compressed", first.error
    view = [*first.messages]
    for step in range(4):
        view += tool_round(f"b{step}", _log(10, f"b{step}"), command=f"make more{step}")
    view += tool_round("c-final", _log(newest_log_lines, "99%"), command="make all")
    forced = context(
        summarize=SUMMARIZER,
        context_length=2_048,
        max_output_tokens=24,
        force=True,
        current_tokens=int(CharCounter().count_messages(view) * RATIO),
        now=2.0,
        state=first.state,
    )
    out = await ENGINE.compress(view, forced)
    assert out.outcome == "compressed", out.error
    check_invariants(out.messages)
    assert out.tokens_after < ENGINE.limits(2_048, 24).threshold
    assert out.clipped, "no carried message was clipped"
    return first, out


def _shown(result: CompressionResult) -> str:
    return "\n".join(text_of(m) for m in result.messages)


async def test_the_task_statement_keeps_its_first_lines_when_the_words_yield() -> None:
    """The newest log leaves no room for the user's words: they yield, but not the original
    request's first lines. Each compression reads the user's words back from the handoff it
    replaces, so one handoff without them loses the task statement for every later view (the
    archive still holds it, but no request shows it again)."""
    _, out = await _forced_after_a_handoff(newest_log_lines=40)
    assert TASK[:120] in _shown(out)


async def test_a_setting_keeps_its_anchor_line_when_the_words_yield() -> None:
    """The anchors take what the user's words leave: where those yield, the anchors keep a
    floor of their own, so the best-ranked (a setting a tool stated) stays in view."""
    first, out = await _forced_after_a_handoff(newest_log_lines=15)
    assert SETTING in _shown(first)
    assert SETTING in _shown(out)
