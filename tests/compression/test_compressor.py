from __future__ import annotations

import copy
from dataclasses import replace

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.engine import CompressionResult
from compression.messages.content import clip_middle
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.state import EngineState, record_real_usage
from compression.summary.handles import rewritten_suffix
from compression.summary.handoff import Handoff, parse_handoff, render_handoff, view_summaries
from compression.summary.prompts import END_MARKER, IN_PROGRESS_MARKER, SUMMARY_PREFIX
from tests.compression.builders import (
    agent_session,
    call,
    calls,
    context,
    reply,
    result,
    system,
    text_of,
    tool_round,
    user,
)
from tests.compression.counters import CharCounter
from tests.compression.summarizers import SUMMARY_BODY, ScriptedSummarizer

ENGINE = Compressor()
NOW = 1_000_000.0


def summaries(messages: list[Message]) -> list[str]:
    return [text_of(m) for m in messages if text_of(m).startswith(SUMMARY_PREFIX)]


async def compress(messages: list[Message], **kwargs: object) -> CompressionResult:
    kwargs.setdefault("summarize", ScriptedSummarizer())
    kwargs.setdefault("now", NOW)
    return await ENGINE.compress(messages, context(**kwargs))  # type: ignore[arg-type]


async def test_under_the_threshold_nothing_is_attempted() -> None:
    messages = agent_session(rounds=1, output_chars=100, asks=1)
    summarizer = ScriptedSummarizer()
    out = await compress(messages, summarize=summarizer)
    assert out.outcome == "skipped"
    assert out.messages == messages
    assert "under the threshold" in (out.error or "")
    assert summarizer.calls == []


async def test_a_long_session_is_compressed_under_the_threshold() -> None:
    messages = agent_session(rounds=6)
    before = copy.deepcopy(messages)
    out = await compress(messages)
    assert messages == before
    assert out.outcome == "compressed"
    check_invariants(out.messages)
    assert out.messages[0] is messages[0]
    assert out.tokens_after < ENGINE.limits(8_000, 1_000).threshold < out.tokens_before
    assert out.messages[-1] is messages[-1]
    assert len(summaries(out.messages)) == 1
    assert out.summary == SUMMARY_BODY
    assert out.state.compression_count == 1
    assert out.state.previous_summary == SUMMARY_BODY
    assert out.state.awaiting_usage
    assert out.summarized > 0
    kept = len(messages) - out.replaced_upto
    assert all(a is b for a, b in zip(out.messages[-kept:], messages[-kept:], strict=True))
    assert out.messages[-kept - 1] is not messages[-kept - 1]
    assert out.messages[:4] == messages[:4]  # system + the first turns, on a first compression


async def test_user_messages_of_the_summarized_region_are_carried_verbatim() -> None:
    messages = agent_session(rounds=6)
    out = await compress(messages)
    summary = summaries(out.messages)[0]
    assert "Request 0: fix bug #0" not in summary  # still verbatim in the head
    for ask in (
        "Request 1: fix bug #1 and never touch main.py",
        "Request 2: fix bug #2 and never touch main.py",
    ):
        assert ask in summary


async def test_the_head_is_kept_on_the_first_compression_only() -> None:
    messages = agent_session(rounds=6)
    first = await compress(messages)
    assert first.messages[1] is messages[1]  # the first user message is protected once
    grown = first.messages + [reply("ok")] + [user("more work")]
    for step in range(8):
        grown += tool_round(f"n{step}", "output\n" * 300, command="make")
    grown.append(user("and now?"))
    second = await compress(grown, state=first.state)
    assert second.outcome == "compressed"
    assert second.messages[0] is grown[0]
    assert text_of(second.messages[1]).startswith(SUMMARY_PREFIX)
    assert len(summaries(second.messages)) == 1


async def test_a_second_compression_updates_the_previous_summary() -> None:
    messages = agent_session(rounds=6)
    first = await compress(messages)
    grown = first.messages + [reply("ok"), user("next task")]
    for step in range(8):
        grown += tool_round(f"n{step}", "output\n" * 300, command="make")
    grown.append(user("status?"))
    summarizer = ScriptedSummarizer(default="## Goal\nupdated")
    second = await compress(grown, state=first.state, summarize=summarizer)
    assert "<previous_summary>\n" + SUMMARY_BODY in summarizer.prompt
    assert "<new_turns>" in summarizer.prompt
    assert SUMMARY_PREFIX not in summarizer.prompt  # the old summary is not re-summarized
    parsed = parse_handoff(summaries(second.messages)[0])
    assert parsed is not None and parsed.handoff.body == "## Goal\nupdated"
    # users carried by the first summary are carried again
    assert "Request 0: fix bug #0 and never touch main.py" in parsed.handoff.user_messages


async def test_a_remembered_summary_missing_from_the_view_is_discarded() -> None:
    state = EngineState(previous_summary="## Goal\nanother conversation", compression_count=3)
    messages = agent_session(rounds=6)
    summarizer = ScriptedSummarizer()
    out = await compress(messages, state=state, summarize=summarizer)
    assert "another conversation" not in summarizer.prompt
    assert "<previous_summary>" not in summarizer.prompt
    assert out.state.previous_summary == SUMMARY_BODY
    skipped = await compress(agent_session(rounds=1, output_chars=10, asks=1), state=state)
    assert skipped.outcome == "skipped" and skipped.state.previous_summary is None


async def test_a_remembered_summary_present_in_the_view_is_kept() -> None:
    first = await compress(agent_session(rounds=6))
    assert view_summaries(first.messages) == [SUMMARY_BODY]
    out = await compress(first.messages, state=first.state)
    assert out.state.previous_summary == SUMMARY_BODY


async def test_the_request_in_progress_is_restated_after_the_summary() -> None:
    messages: list[Message] = [
        system(),
        user("first ask"),
        reply("ok"),
        user("second ask"),
        reply("ok"),
        user("Port the parser to Rust; keep the public API unchanged."),
    ]
    for step in range(30):
        messages += tool_round(f"r{step}", f"compiling step {step}\n" * 60, command="cargo build")
    out = await compress(messages)
    assert out.outcome == "compressed"
    check_invariants(out.messages)
    restated = [m for m in out.messages if IN_PROGRESS_MARKER in text_of(m)]
    assert len(restated) == 1 and restated[0]["role"] == "user"
    assert text_of(restated[0]).endswith("Port the parser to Rust; keep the public API unchanged.")
    position = next(i for i, m in enumerate(out.messages) if m is restated[0])
    assert text_of(out.messages[position - 1]).endswith(END_MARKER)
    assert out.messages[-1] is messages[-1]


async def test_the_newest_assistant_reply_survives_verbatim() -> None:
    answer = "The root cause is the stale cache in loader.py line 40."
    messages: list[Message] = [
        system(),
        user("why does it fail?"),
        reply(answer),
        user("fix it then"),
    ]
    for step in range(30):
        messages += tool_round(f"r{step}", f"editing {step}\n" * 80, command="sed -i x")
    out = await compress(messages)
    assert out.outcome == "compressed"
    assert any(answer in text_of(m) for m in out.messages)


async def test_tool_groups_are_never_split() -> None:
    messages: list[Message] = [system(), user("go")]
    for step in range(12):
        ids = [f"p{step}_{k}" for k in range(3)]
        messages.append(calls(*(call(i, "read_file", path=f"f{i}.py") for i in ids)))
        messages += [result(i, f"contents of {i}\n" * 90) for i in ids]
    messages.append(user("summarize the files"))
    out = await compress(messages)
    assert out.outcome == "compressed"
    check_invariants(out.messages)
    assert out.messages[2]["role"] != "tool"


async def test_nothing_to_compress_is_a_noop_with_a_backoff() -> None:
    messages = [system(), user("x" * 30_000)]
    out = await compress(messages, force=True)
    assert out.outcome == "noop"
    assert out.messages == messages
    assert out.state.noop_until == NOW + 300
    assert out.state.strikes == 0
    again = await compress(messages, state=out.state, now=NOW + 10)
    assert again.outcome == "skipped" and "backoff" in (again.error or "")


async def test_a_result_that_does_not_fit_is_rejected_with_a_strike() -> None:
    messages = agent_session(rounds=6)
    messages[-1] = user("paste:\n" + "data " * 8_000)  # the newest ask alone is over the line
    summarizer = ScriptedSummarizer()
    out = await compress(messages, summarize=summarizer)
    assert out.outcome == "rejected"
    assert summarizer.calls == []  # no summary could have helped
    assert out.messages == messages
    assert out.state.strikes == 1
    again = await compress(messages, state=out.state, now=NOW + 1)
    assert again.outcome == "rejected" and again.state.strikes == 2
    blocked = await compress(messages, state=again.state, now=NOW + 2)
    assert blocked.outcome == "skipped" and "anti-thrash" in (blocked.error or "")
    probe = await compress(messages, state=again.state, now=NOW + 400)
    assert probe.outcome == "rejected" and probe.state.blocked_until == NOW + 700


async def test_forced_compression_ignores_threshold_and_blocks() -> None:
    messages = agent_session(rounds=6)
    state = EngineState(
        cooldown_until=NOW + 500,
        cooldown_reason="timeout",
        strikes=2,
        blocked_until=NOW + 100,
        noop_until=NOW + 100,
    )
    out = await compress(messages, state=state, force=True, context_length=100_000)
    assert out.outcome == "compressed"


async def test_hygiene_bypasses_cooldowns() -> None:
    messages = agent_session(rounds=6)
    state = EngineState(cooldown_until=NOW + 500, cooldown_reason="timeout")
    blocked = await compress(messages, state=state)
    assert blocked.outcome == "skipped" and "cooldown" in (blocked.error or "")
    out = await compress(messages, state=state, trigger="hygiene")
    assert out.outcome == "compressed"


async def test_real_usage_after_compression_judges_it() -> None:
    state = EngineState(awaiting_usage=True)
    struck = record_real_usage(state, 70_000, 64_000, NOW)
    assert struck.strikes == 1 and not struck.awaiting_usage
    assert record_real_usage(struck, 70_000, 64_000, NOW) == struck  # no verdict pending
    twice = record_real_usage(replace(struck, awaiting_usage=True), 65_000, 64_000, NOW)
    assert twice.strikes == 2 and twice.blocked_until == NOW + 300
    assert record_real_usage(twice, 10_000, 64_000, NOW).strikes == 0


async def test_without_a_summarizer_the_fallback_summary_is_used() -> None:
    out = await compress(agent_session(rounds=6), summarize=None)
    assert out.outcome == "fallback"
    assert out.state.cooldown_until == 0.0
    summary = summaries(out.messages)[0]
    assert "## Completed Actions\nCalled tool(s): bash x" in summary
    assert "no summary model configured" in summary


async def test_the_calibrated_figure_is_reported() -> None:
    messages = agent_session(rounds=6)
    estimate = CharCounter().count_messages(messages)
    out = await compress(messages, current_tokens=int(estimate * 1.2), context_length=10_000)
    assert out.outcome == "compressed"
    assert out.tokens_before == int(estimate * 1.2)
    plain = await compress(messages, context_length=10_000, force=True)
    # each figure is its view in the provider's tokens: ours, scaled by what it counts more
    count = CharCounter().count_messages
    assert out.tokens_after == int(count(out.messages) * 1.2)
    assert plain.tokens_after == count(plain.messages)


async def test_tool_schemas_count_toward_the_figure() -> None:
    messages = agent_session(rounds=1, output_chars=100, asks=1)
    tools = [{"type": "function", "function": {"name": "t", "description": "d" * 40_000}}]
    out = await compress(messages, tools=tools)
    assert out.outcome != "skipped" or "under the threshold" not in (out.error or "")


async def test_state_round_trips_through_json() -> None:
    out = await compress(agent_session(rounds=6))
    assert EngineState.from_json(out.state.to_json()) == out.state
    assert EngineState.from_json(None) == EngineState()
    odd = EngineState.from_json(
        {
            "strikes": "two",
            "failure_streak": {"timeout": 2},
            "unknown": 1,
            "previous_summary": 5,
            "summary_calibration": "1.2",
        }
    )
    assert odd == EngineState(failure_streak={"timeout": 2})


async def test_options_shape_the_pass() -> None:
    carried = []
    for share in (0.5, 0.0001):
        engine = Compressor(CompressorOptions(user_share=share))
        out = await engine.compress(
            agent_session(rounds=6), context(summarize=ScriptedSummarizer(), now=NOW)
        )
        parsed = parse_handoff(summaries(out.messages)[0])
        assert parsed is not None
        carried.append(len(parsed.handoff.user_messages))
    assert carried[0] > carried[1] == 0


async def test_malformed_tool_calls_do_not_break_a_pass() -> None:
    messages = agent_session(rounds=6)
    odd: list[Message] = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "m1", "type": "function"}]},  # type: ignore[list-item]
        result("m1", "no function object " * 40),
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "m2", "function": "bad"}]},  # type: ignore[list-item]
        result("m2", "odd"),
    ]
    messages[5:5] = odd
    out = await compress(messages, force=True)
    assert out.outcome == "compressed"
    check_invariants(out.messages)


async def test_a_view_breaking_an_invariant_is_never_committed() -> None:
    messages = [user("hello"), *agent_session(rounds=6)]  # a system message that is not first
    out = await compress(messages, force=True)
    assert out.outcome == "aborted" and out.failure_class == "invariant"
    assert out.messages == messages
    assert "system message is not first" in (out.error or "")


def heavy_opening(output_chars: int = 60_000) -> list[Message]:
    """[system, user, a call with a huge result, another call with a small one]."""
    lines = (f"worker {n} handled request {n * 31 % 997} in {n % 89} ms\n" for n in range(2000))
    log = "".join(lines)
    return [
        system(),
        user("Find why the worker pool stalls."),
        *tool_round("c1", log[:output_chars], name="read_file", path="logs/worker.log"),
        *tool_round("c2", "0\nexit code: 0", command="grep -c 503 logs/worker.log"),
    ]


async def test_a_forced_pass_over_only_the_opening_clips_its_tool_outputs() -> None:
    messages = heavy_opening()
    unforced = await compress(messages, trigger="hygiene")
    assert unforced.outcome == "noop"
    forced = await compress(messages, force=True, trigger="overflow")
    assert forced.outcome == "compressed", forced.error
    check_invariants(forced.messages)
    assert forced.tokens_after < ENGINE.limits(8_000, 1_000).threshold < forced.tokens_before
    assert [m["role"] for m in forced.messages] == [m["role"] for m in messages]
    assert forced.messages[:3] == messages[:3]  # system, request and call untouched
    clipped = text_of(forced.messages[3])
    assert "chars omitted" in clipped and clipped.startswith("worker 0 handled")
    assert forced.messages[4:] == messages[4:]  # short outputs are left alone
    assert forced.summary is None and forced.state.compression_count == 1


async def test_a_forced_pass_clips_nothing_when_nothing_is_over() -> None:
    messages = heavy_opening(output_chars=3_000)
    out = await compress(messages, force=True, trigger="manual")
    assert out.outcome == "noop"
    assert out.messages == messages


def crowded_session(records: int = 60) -> list[Message]:
    """A system prompt that takes most of the threshold, then lookups returning record ids."""
    messages: list[Message] = [system("Policy line that the agent must follow.\n" * 500)]
    messages.append(user("Find the reservations of user mia_li_3668 and cancel the late ones."))
    for n in range(records):
        output = f'{{"reservation_id": "R{n:04d}Q", "status": "late", "note": "{"x" * 60}"}}'
        messages += tool_round(f"c{n}", output, name="get_reservation", command=f"lookup {n}")
    messages.append(user("Which ones are left?"))
    return messages


async def test_a_hygiene_pass_keeps_the_ids_where_its_line_leaves_room() -> None:
    """The system prompt leaves the plan almost nothing under the threshold; the hygiene line
    is higher: the anchors take their floor there, each id with what it is."""
    messages = crowded_session()
    out = await compress(messages, trigger="hygiene")
    assert out.outcome == "compressed", out.error
    assert out.tokens_after < ENGINE.limits(8_000, 1_000).hygiene_tokens
    parsed = parse_handoff(summaries(out.messages)[0])
    assert parsed is not None
    anchors = parsed.handoff.anchors
    ids = [v for v in anchors.tools if v.startswith("R") and v.endswith("Q")]
    assert len(ids) >= 15  # the planned budget alone holds 6
    said = anchors.glosses()
    assert all("reservation_id" in said.get(v, "") for v in ids)  # none bare
    assert anchors.commands[:2] == ("lookup 58", "lookup 57")  # what the agent ran, newest first


async def test_a_clipped_carried_request_is_carried_whole_again_from_its_original() -> None:
    """A handoff that had to clip the task statement names its original; the next pass,
    given the original (the client resends it), carries it whole again where it fits,
    instead of reading the clip back as the message and clipping it further."""
    ask = "Fix the parser. " + "Background on the bug. " * 40 + "Never touch main.py."
    clip = clip_middle(ask, 300) + rewritten_suffix(1)
    summary = user(render_handoff(Handoff("## Goal\nfix the parser", (clip,))))
    messages = [system(), summary, *agent_session(rounds=8)[1:]]
    for originals, whole in (({clip: ask}, True), ({}, False)):
        out = await compress(messages, originals=originals)
        assert out.outcome == "compressed"
        parsed = [parse_handoff(s) for s in summaries(out.messages)]
        carried = [t for p in parsed if p is not None for t in p.handoff.user_messages]
        assert (ask in carried) is whole
        assert any(t.startswith("Fix the parser.") for t in carried)
