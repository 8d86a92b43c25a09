from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compression.assembly.planning import Budgets, CutPlan
from compression.counting.figures import PassFigures
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, parse_handoff, render_handoff
from compression.verbatim.anchors import AnchorIndex
from compression.verbatim.carry import anchor_candidates, carry_section
from compression.verbatim.commands import (
    COMMAND_PREFIX,
    MAX_COMMAND_CHARS,
    commands_of,
    select_commands,
)
from tests.compression.builders import call, calls, reply, system, tool_round, user
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def test_commands_come_from_tool_calls_and_text_agents_fenced_blocks() -> None:
    shell = calls(call("c1", "bash", command="pytest tests/test_app.py::test_total -x"))
    codex = calls(call("c2", "shell", cmd="rg -n 'def total' src/"))
    text = reply("DISCUSSION\nLet me open it.\n```\nopen src/app.py 120\n```")
    long = calls(call("c3", "bash", command="echo " + "x" * MAX_COMMAND_CHARS))
    multi = calls(call("c4", "bash", command="cd src\nmake"))
    assert commands_of(shell) == ["pytest tests/test_app.py::test_total -x"]
    assert commands_of(codex) == ["rg -n 'def total' src/"]
    assert commands_of(text) == ["open src/app.py 120"]
    assert commands_of(long) == [] and commands_of(multi) == []
    assert commands_of(user("```\nrm -rf /\n```")) == []  # only what the agent ran


def test_a_handoff_carries_its_commands_through_the_next_compression() -> None:
    index = AnchorIndex(("u_0001",), (), (), (("u_0001", "user_id"),), ("make test", "ls -F"))
    parsed = parse_handoff(render_handoff(Handoff("## Goal\nShip.", anchors=index)))
    assert parsed is not None and parsed.handoff.anchors == index
    assert f"{COMMAND_PREFIX}make test\n{COMMAND_PREFIX}ls -F" in render_handoff(
        Handoff("", anchors=index)
    )


def test_the_section_carries_the_commands_newest_first_once() -> None:
    messages = [
        system(),
        user("Fix the failing total."),
        *tool_round("c1", "1 failed", command="pytest -x"),
        *tool_round("c2", "src/app.py:9", command="grep -n total src/app.py"),
        *tool_round("c3", "1 failed", command="pytest -x"),
        reply("```\nopen src/app.py 9\n```"),
        user("go on"),
        *tool_round("c4", "ok", command="make lint"),
    ]
    figures = PassFigures.measure(messages, CharCounter(), None)
    budgets = Budgets(
        target=10**9, tail=1, reach=1, carry=0, summary_cap=1_000, floor=1, anchors=200
    )
    plan = CutPlan(1, len(messages) - 2, None, None, 0, budgets)
    kept = [*messages[:1], *messages[-2:]]
    _, anchors = carry_section(messages, plan, figures, CompressorOptions(), COUNT, kept)
    assert anchors.commands == ("open src/app.py 9", "pytest -x", "grep -n total src/app.py")


COMMAND = st.from_regex(r"[a-z][a-z0-9 ./_-]{0,40}", fullmatch=True)


@given(
    commands=st.lists(COMMAND, max_size=30),
    room=st.integers(0, 300),
    held=st.sets(COMMAND, max_size=5),
)
def test_selection_stays_in_its_room_in_order_once(
    commands: list[str], room: int, held: set[str]
) -> None:
    chosen, used = select_commands(commands, room, COUNT, held.__contains__)
    assert used == sum(COUNT(COMMAND_PREFIX + c + "\n") for c in chosen) <= room
    assert len(set(chosen)) == len(chosen) and not set(chosen) & held
    offered = [c for c in dict.fromkeys(commands) if c not in held]
    assert list(chosen) == offered[: len(chosen)]


def test_commands_are_collected_past_the_messages_that_fill_the_anchor_tiers() -> None:
    """The newest messages can fill every tier of anchors at once; the commands run before
    them are still gathered (as many as a tier holds), newest first."""
    messages = [system()]
    for n in range(10):  # each round names enough for every tier: the user's, agent's, tool's
        named = " ".join(f"USR_{n}_{k}" for k in range(6))
        run = " ".join(f"RUN_{n}_{k}" for k in range(6))
        out = " ".join(f"/srv/app/mod_{n}_{k}.py" for k in range(6))
        messages += [user(f"Fix these: {named}"), *tool_round(f"c{n}", out, command=f"make {run}")]
    found = anchor_candidates(messages, 1, len(messages), per_tier=5)
    assert all(len(tier) >= 5 for tier in found.candidates())
    assert [c.split()[1] for c in found.commands] == [f"RUN_{n}_0" for n in range(9, 4, -1)]
