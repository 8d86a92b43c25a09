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


def lookup(number: int, fact: str = "") -> list[Message]:
    """A tool round of a record-lookup agent: JSON records full of ids, perhaps with a fact
    (a sentence that states a value, then the same value as a `KEY: value` line)."""
    records = "\n".join(
        f'{{"reservation_id": "R{number:03d}{k:02d}X", "flight_number": "HAT{number:03d}"}}'
        for k in range(12)
    )
    output = f"{records}\n{fact}\nstep {number} done"
    return tool_round(f"c{number}", output, command=f"step {number}")


async def test_a_key_value_line_of_a_tool_output_survives_compression_after_compression() -> None:
    """A fact a later turn refers to (`VAULT_CODE: value`) stays in view as that line, though
    its tool output is summarized and the handoff summarized again: once the later turns use
    the value bare (a command's argument), and once not at all."""
    code = "NEEDLE-5e7a11c0d9"
    fact = f"The access code for the staging vault is {code}.\nVAULT_CODE: {code}"
    for passes_value in (False, True):
        engine = Compressor()
        counter = CharCounter()
        limits = engine.limits(WINDOW, 1_000)
        state = EngineState()
        view: list[Message] = [system(), user("Open the staging vault, then book the flights.")]
        compressed_after_fact = 0
        for number in range(160):
            view = view + lookup(number, fact if number == 20 else "")
            if number == 22:
                view += [user("Pass the VAULT_CODE when you open the vault."), reply("Will do.")]
            if passes_value and number > 22:
                view[-2] = tool_round(f"c{number}", "", command=f"open --code {code}")[0]
            out = await engine.compress(
                view,
                context(
                    summarize=ScriptedSummarizer(default="## Goal\nopen the vault"),
                    context_length=WINDOW,
                    counter=counter,
                    state=state,
                    now=float(number),
                ),
            )
            if out.outcome in ("compressed", "fallback"):
                view = out.messages
                if number >= 20:
                    compressed_after_fact += 1
                    seen = "\n".join(text_of(m) for m in view)
                    assert f"VAULT_CODE: {code}" in seen, (passes_value, number)
            state = record_real_usage(
                out.state, counter.count_messages(view), limits.threshold, float(number)
            )
        assert compressed_after_fact >= 3  # its output summarized, then the handoff twice


def decompiled(number: int, fact: str = "") -> list[Message]:
    """A tool round of a reverse-engineering agent: a decompiler's output, every round with
    ids of its own (locals, data labels), perhaps with a setting stated as `KEY: value`."""
    body = "\n".join(
        f"  local_{number}_{k} = DAT_{number:04x}{k:04x} + param_{number}_{k};" for k in range(6)
    )
    notes = "\n".join(
        f"  // block {k}: a loop over the input buffer, nothing notable" for k in range(20)
    )
    output = f"void FUN_{number:08x}(void)\n{{\n{body}\n{notes}\n}}\n{fact}"
    return tool_round(f"c{number}", output, command=f"decompile FUN_{number:08x}")


async def test_a_setting_a_tool_stated_outlasts_the_newer_ids_of_tool_output() -> None:
    """A `KEY: value` setting in one tool output that no turn names again stays in view as
    that line while every later output brings ids of its own: re-read from each handoff, it
    would otherwise fall behind the newer ids (or not be read at all once they fill the
    anchors' scan) and drop out at the next compression."""
    code = "NEEDLE-0c4f0df637"
    engine = Compressor()
    counter = CharCounter()
    limits = engine.limits(WINDOW, 1_000)
    state = EngineState()
    view: list[Message] = [system(), user("Find the flag in the rock binary.")]
    compressed_after_fact = 0
    for number in range(150):
        view = view + decompiled(number, f"STAGING_VAULT: {code}" if number == 10 else "")
        ctx = context(
            summarize=ScriptedSummarizer(default="## Goal\nfind the flag"),
            context_length=WINDOW,
            counter=counter,
            state=state,
            now=float(number),
        )
        out = await engine.compress(view, ctx)
        if out.outcome in ("compressed", "fallback"):
            view = out.messages
            if number >= 10:
                compressed_after_fact += 1
                seen = "\n".join(text_of(m) for m in view)
                assert f"STAGING_VAULT: {code}" in seen, number
        state = record_real_usage(
            out.state, counter.count_messages(view), limits.threshold, float(number)
        )
    assert compressed_after_fact >= 4  # its output summarized, then the handoff again and again
