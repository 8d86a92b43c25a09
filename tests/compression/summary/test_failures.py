"""Each summary failure class takes its documented path."""

from __future__ import annotations

import pytest

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.engine import CompressionResult, SummaryCallError, SummaryReply
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.state import EngineState
from compression.summary.prompts import SUMMARY_PREFIX
from tests.compression.builders import agent_session, context, text_of
from tests.compression.summarizers import SUMMARY_BODY, ScriptedSummarizer, StalledSummarizer

NOW = 5_000.0
SECRET_ERROR = "upstream said: invalid key sk-live-abcdefghijklmnopqrstuvwxyz"


def session() -> list[Message]:
    return agent_session(rounds=6)


async def run(
    step: SummaryReply | BaseException,
    *,
    engine: Compressor | None = None,
    state: EngineState | None = None,
    now: float = NOW,
) -> CompressionResult:
    engine = engine or Compressor()
    ctx = context(summarize=ScriptedSummarizer(step), state=state, now=now)
    return await engine.compress(session(), ctx)


@pytest.mark.parametrize(
    ("step", "kind", "cooldown"),
    [
        (SummaryCallError("unauthorized", status=401), "auth", 600.0),
        (SummaryCallError("quota exceeded", status=402), "auth", 600.0),
        (SummaryCallError("forbidden", status=403), "auth", 600.0),
        (SummaryCallError("connection refused", network=True), "network", 60.0),
        (SummaryReply("", "stop"), "empty", 30.0),
        (SummaryReply("## Historical Task Snaps", "length"), "truncated", 60.0),
    ],
)
async def test_abort_classes_leave_the_view_unchanged(
    step: SummaryReply | BaseException, kind: str, cooldown: float
) -> None:
    out = await run(step)
    assert out.outcome == "aborted"
    assert out.messages == session()
    assert out.failure_class == kind
    assert out.error is not None and f"({kind})" in out.error
    assert out.state.cooldown_until == NOW + cooldown
    assert out.state.cooldown_reason == kind
    assert out.state.compression_count == 0


@pytest.mark.parametrize(
    ("step", "kind"),
    [
        (SummaryCallError("slow", timeout=True), "timeout"),
        (SummaryCallError("rate limited", status=429), "timeout"),
        (SummaryCallError("gateway timeout", status=504), "timeout"),
        (SummaryCallError("overloaded", status=529), "overload"),
        (SummaryCallError(SECRET_ERROR, status=500), "other"),
        (SummaryReply("I'm sorry, I can't help with that.", "stop"), "other"),
        (TimeoutError(), "timeout"),
    ],
)
async def test_other_classes_commit_a_deterministic_fallback(
    step: SummaryReply | BaseException, kind: str
) -> None:
    out = await run(step)
    assert out.outcome == "fallback"
    assert out.failure_class == kind
    check_invariants(out.messages)
    summary = next(text_of(m) for m in out.messages if text_of(m).startswith(SUMMARY_PREFIX))
    assert "## Completed Actions\nCalled tool(s): bash x" in summary
    assert f"unavailable ({kind})" in summary
    assert "sk-live" not in summary and "I'm sorry" not in summary
    assert out.state.compression_count == 1
    assert out.state.cooldown_reason == kind


async def test_a_truncated_summary_is_kept_to_its_last_complete_line() -> None:
    out = await run(SummaryReply(SUMMARY_BODY + "\n## Open Questions\nWhether the te", "length"))
    assert out.outcome == "compressed"
    assert out.summary_truncated is True
    assert out.error is not None and "output limit" in out.error
    assert out.failure_class is None
    # The cut-off line goes, and so does the heading it would have filled.
    assert out.summary == SUMMARY_BODY
    check_invariants(out.messages)
    assert any(out.summary in text_of(m) for m in out.messages)
    assert out.state.compression_count == 1 and out.state.cooldown_until == 0.0


async def test_a_truncated_reply_is_still_checked_for_error_text() -> None:
    out = await run(SummaryReply("Error: upstream returned 500.\nTraceback (most rec", "length"))
    assert out.outcome == "fallback" and out.failure_class == "other"
    assert "upstream returned 500" not in (out.summary or "")


@pytest.mark.parametrize(
    "step",
    [SummaryReply("", "stop"), SummaryReply("## Historical Task Snaps", "length")],
    ids=["empty", "truncated"],
)
async def test_a_forced_pass_falls_back_when_the_model_returns_nothing_usable(
    step: SummaryReply,
) -> None:
    ctx = context(summarize=ScriptedSummarizer(step), now=NOW, force=True, trigger="overflow")
    out = await Compressor().compress(session(), ctx)
    assert out.outcome == "fallback"
    assert out.failure_class in ("empty", "truncated")
    assert out.summary is not None and "## Completed Actions" in out.summary
    assert f"unavailable ({out.failure_class})" in out.summary
    check_invariants(out.messages)
    assert out.state.cooldown_reason == out.failure_class


async def test_a_forced_pass_still_aborts_on_auth_failures() -> None:
    failing = ScriptedSummarizer(SummaryCallError("unauthorized", status=401))
    out = await Compressor().compress(session(), context(summarize=failing, now=NOW, force=True))
    assert out.outcome == "aborted" and out.failure_class == "auth"
    assert out.messages == session()


async def test_timeout_cooldowns_escalate() -> None:
    state = EngineState()
    seen = []
    for attempt in range(4):
        now = NOW + attempt * 10_000
        out = await run(SummaryCallError("slow", timeout=True), state=state, now=now)
        seen.append(out.state.cooldown_until - now)
        state = EngineState(failure_streak=out.state.failure_streak)
    assert seen == [60.0, 300.0, 900.0, 900.0]


async def test_the_engine_times_out_a_stalled_summarizer() -> None:
    engine = Compressor(CompressorOptions(summary_timeout=0.01))
    summarizer = StalledSummarizer()
    out = await engine.compress(session(), context(summarize=summarizer, now=NOW))
    assert summarizer.calls == 1
    assert out.outcome == "fallback" and out.failure_class == "timeout"


async def test_abort_on_summary_failure_keeps_the_view() -> None:
    engine = Compressor(CompressorOptions(abort_on_summary_failure=True))
    out = await run(SummaryCallError("boom", status=500), engine=engine)
    assert out.outcome == "aborted" and out.failure_class == "other"
    assert out.messages == session()


async def test_a_cooldown_blocks_automatic_passes_but_not_forced_ones() -> None:
    failed = await run(SummaryCallError("boom", status=500))
    summarizer = ScriptedSummarizer()
    blocked = await Compressor().compress(
        session(), context(summarize=summarizer, state=failed.state, now=NOW + 30)
    )
    assert blocked.outcome == "skipped" and summarizer.calls == []
    forced = await Compressor().compress(
        session(), context(summarize=summarizer, state=failed.state, now=NOW + 30, force=True)
    )
    assert forced.outcome == "compressed"
    assert forced.state.cooldown_until == 0.0 and forced.state.failure_streak == {}


async def test_a_summarizer_bug_is_contained_as_a_failure() -> None:
    out = await run(KeyError("oops"))
    assert out.outcome == "fallback" and out.failure_class == "other"
