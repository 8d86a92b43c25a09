"""A session grown to many times its window, compressed the way the proxy drives the engine."""

from __future__ import annotations

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.messages.types import Message
from compression.state import EngineState, record_real_usage
from compression.summary.handoff import parse_handoff, view_summaries
from tests.compression.builders import context, reply, system, text_of, tool_round, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer

WINDOW = 16_000


def turn(number: int) -> list[Message]:
    messages: list[Message] = [user(f"Task {number}: update module_{number}.py; keep tests green")]
    for step in range(4):
        messages += tool_round(
            f"call_{step}", f"module_{number} step {step}\n" * 120, command=f"pytest -k m{number}"
        )  # ids reused every turn
    messages.append(reply(f"Updated module_{number}.py."))
    return messages


async def test_a_session_ten_times_its_window_stays_valid_and_bounded() -> None:
    engine = Compressor()
    counter = CharCounter()
    limits = engine.limits(WINDOW, 1_000)
    state = EngineState()
    view: list[Message] = [system()]
    sent = compressions = 0
    for number in range(80):
        view = view + turn(number)[:-1]
        summarizer = ScriptedSummarizer(default=f"## Goal\nstate after task {number}")
        out = await engine.compress(
            view,
            context(
                summarize=summarizer,
                context_length=WINDOW,
                counter=counter,
                state=state,
                now=float(number),
            ),
        )
        if out.outcome in ("compressed", "fallback"):
            compressions += 1
            view = out.messages
        state = out.state
        tokens = counter.count_messages(view)
        check_invariants(view)
        assert tokens < WINDOW - 1_000, (number, out.outcome, out.error)
        state = record_real_usage(state, tokens, limits.threshold, float(number))
        sent += tokens
        view = view + [turn(number)[-1]]
        assert len(view_summaries(view)) <= 1
    assert compressions >= 10
    assert state.compression_count == compressions
    assert state.strikes == 0
    summary = next(text_of(m) for m in view if parse_handoff(text_of(m)))
    parsed = parse_handoff(summary)
    assert parsed is not None
    seen = "\n".join(text_of(m) for m in view)
    missing = [n for n in range(80) if f"Task {n}: update module_{n}.py" not in seen]
    assert missing == []  # every user message in view, whole or clipped with its handle
    full = counter.count_messages([system()] + [m for n in range(80) for m in turn(n)])
    assert full > 10 * WINDOW and sent < full * 80 / 4


TASK = (
    "Please solve this issue: the parser crashes on empty input files.\n\n"
    + "Reproduction details and logs follow. " * 60
    + "\nConstraint: never modify setup.py."
)


def action_round(number: int) -> list[Message]:
    """A text-action agent's round: the command in a fenced block, its output as `user`."""
    log = "log line\n" * 150
    output = f"<returncode>0</returncode>\n<output>\n{log}result id run_{number:04d}x"
    return [reply(f"Step {number}.\n```bash\nmake step{number}\n```"), user(output + "\n</output>")]


async def test_a_text_agent_keeps_its_task_and_the_newest_output_ids_not_its_outputs() -> None:
    engine = Compressor()
    counter = CharCounter()
    limits = engine.limits(WINDOW, 1_000)
    state = EngineState()
    view: list[Message] = [system(), user(TASK)]
    for number in range(160):
        view = view + action_round(number)
        out = await engine.compress(
            view,
            context(
                summarize=ScriptedSummarizer(default="## Goal\nfix the parser"),
                context_length=WINDOW,
                counter=counter,
                state=state,
                now=float(number),
            ),
        )
        if out.outcome in ("compressed", "fallback"):
            view = out.messages
        state = out.state
        check_invariants(view)
        tokens = counter.count_messages(view)
        state = record_real_usage(state, tokens, limits.threshold, float(number))
    assert state.compression_count >= 5
    summary = next(text_of(m) for m in view if parse_handoff(text_of(m)))
    parsed = parse_handoff(summary)
    assert parsed is not None
    carried = parsed.handoff.user_messages
    # the task statement, clipped to its head and tail, and no command output posing as it
    assert (
        carried[0].startswith("Please solve this issue") and "never modify setup.py" in carried[0]
    )
    assert not any("<returncode>" in text for text in carried)
    anchors = parsed.handoff.anchors.tools
    assert anchors and all(value.startswith("run_") for value in anchors)
    newest_summarized = max(int(value[4:8]) for value in anchors)
    assert f"run_{newest_summarized + 1:04d}x" in "\n".join(text_of(m) for m in view[2:])
