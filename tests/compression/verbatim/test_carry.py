from __future__ import annotations

from compression.assembly.planning import Budgets, CutPlan
from compression.counting.figures import PassFigures
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, render_handoff
from compression.summary.handoff import user_text as read_user_text
from compression.summary.prompts import RECALLED_CLOSE, RECALLED_OPEN
from compression.verbatim.anchors import AnchorIndex
from compression.verbatim.carry import anchor_candidates, carry_candidates, carry_section
from compression.verbatim.labels import system_path
from tests.compression.builders import reply, system, tool_round, user
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def test_candidates_include_what_an_earlier_summary_carried() -> None:
    earlier = render_handoff(Handoff("## Goal\nx", ("first ask", "second ask")))
    messages = [
        system(),
        {"role": "user", "content": earlier},
        reply("ok"),
        user("third ask: never use eval"),
        user("   "),
        user("newest"),
    ]
    figures = PassFigures.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 6, 5, figures)
    assert [c.text for c in found] == ["first ask", "second ask", "third ask: never use eval"]
    assert [c.opening for c in found] == [True, False, False]
    assert [c.instruction for c in found] == [False, False, True]


def test_a_message_the_summary_was_merged_into_is_not_the_original_request() -> None:
    merged = render_handoff(Handoff("## Goal\nx", ("first ask",))) + "\n\nwhat next?"
    output = render_handoff(Handoff("## Goal\nx")) + "\n\n<returncode>0</returncode>\nok"
    messages = [system(), user(merged), reply("ok"), user(output)]
    figures = PassFigures.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 4, None, figures)
    assert [(c.text, c.opening) for c in found] == [("first ask", True), ("what next?", False)]


def text_agent() -> list[Message]:
    """A text-action agent: the harness sends command output back as `user` messages."""
    return [
        system(),
        user("Please fix the failing test in tests/test_app.py; do not edit setup.py."),
        reply("Let me look.\n```bash\npytest -q\n```"),
        user("<returncode>1</returncode>\n<output>\nE   AssertionError: 2 != 3\n</output>"),
        reply("Now the file.\n```bash\ncat -n app.py\n```"),
        user("     1\tdef add(a, b):\n     2\t    return a - b\n" * 5),
        reply("Also keep the public API stable, you said? I will.\n```bash\nsubmit\n```"),
        user("Thanks. Also: keep the changelog untouched."),
        reply("Noted."),
    ]


def test_tool_observations_sent_as_user_messages_are_not_candidates() -> None:
    messages = text_agent()
    figures = PassFigures.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, len(messages), None, figures)
    assert [c.text for c in found] == [
        "Please fix the failing test in tests/test_app.py; do not edit setup.py.",
        "Thanks. Also: keep the changelog untouched.",
    ]
    assert [c.opening for c in found] == [True, False]


def plan_for(messages: list[Message], end: int, carry: int, anchors: int) -> CutPlan:
    budgets = Budgets(
        target=10**9,
        tail=1,
        reach=1,
        carry=carry,
        summary_cap=1_000,
        floor=1,
        anchors=anchors,
    )
    return CutPlan(1, end, None, None, 0, budgets)


def test_the_section_carries_the_ask_and_anchors_of_tool_output() -> None:
    messages = [
        system(),
        user("Book flight HAT136 for user mia_li_3668; never use the 7447 card."),
        *tool_round("c1", '{"reservation_id": "XEWRD9", "payment": "gift_card_4643416"}'),
        reply("Booked XEWRD9."),
        *tool_round("c2", "Traceback ...\nZeroDivisionError: division by zero", command="make"),
        user("what now?"),
    ]
    figures = PassFigures.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=200, anchors=60)
    tail = messages[-1:]
    users, anchors = carry_section(
        messages, plan, figures, CompressorOptions(), COUNT, [*messages[:1], *tail, "summary"]
    )
    assert users.texts == ("Book flight HAT136 for user mia_li_3668; never use the 7447 card.",)
    # quoted by a carried message already, so not repeated as anchors
    assert "mia_li_3668" not in anchors.user and "HAT136" not in anchors.user
    assert "XEWRD9" in anchors.agent  # the assistant named it
    assert {"gift_card_4643416", "ZeroDivisionError"} <= set(anchors.tools)


def test_anchors_already_in_the_view_are_not_repeated_and_the_budget_holds() -> None:
    outputs = [f"record rec_{n:04d}_x" for n in range(200)]
    messages: list[Message] = [system(), user("go")]
    for n, output in enumerate(outputs):
        messages += tool_round(f"c{n}", output)
    messages.append(user("next"))
    figures = PassFigures.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=0, anchors=120)
    _, anchors = carry_section(
        messages, plan, figures, CompressorOptions(), COUNT, ["summary names rec_0199_x"]
    )
    assert anchors.tools[0] == "rec_0198_x"  # newest first, the quoted one skipped
    assert sum(COUNT(value + ", ") for value in anchors.tools) <= 120


def test_no_room_means_no_anchors() -> None:
    messages = [system(), user("go"), *tool_round("c1", "id abc_12345"), user("next")]
    figures = PassFigures.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=0, anchors=0)
    assert not carry_section(messages, plan, figures, CompressorOptions(), COUNT, [])[1]


def test_a_message_after_the_region_takes_back_one_in_it() -> None:
    messages = [
        system(),
        user("Build the importer."),
        reply("ok"),
        user("Always store the rows in PostgreSQL."),
        reply("ok"),
        user("How long will the import take?"),
        reply("A minute."),
        user("Forget the earlier instruction about PostgreSQL; SQLite is fine."),
    ]
    figures = PassFigures.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 7, None, figures)
    assert [(c.text[:12], c.superseded) for c in found] == [
        ("Build the im", False),
        ("Always store", True),
        ("How long wil", False),
    ]
    # The message that takes it back is the one restated: it still takes it back.
    found = carry_candidates(messages, 1, 8, 7, figures)
    assert [c.superseded for c in found] == [False, True, False]


def test_passages_ctxgate_recalled_into_a_user_message_are_not_carried_as_theirs() -> None:
    said = "Where is booking XEWRD9?"
    placed = f"{said}\n\n{RECALLED_OPEN}\nm4 (tool): XEWRD9 is in Lisbon\n{RECALLED_CLOSE}"
    assert read_user_text({"role": "user", "content": placed}) == said


def test_an_earlier_handoff_in_the_restated_message_gives_its_anchors_to_the_new_one() -> None:
    """The newest user message that an earlier handoff was merged into is kept (restated) by
    its words alone: the new handoff replaces the earlier one, so what the earlier one named
    is not in view through it and is carried again."""
    earlier = AnchorIndex((), (), ("order_7731_x", "HAT136"), (), ("make test",))
    merged = render_handoff(Handoff("## Goal\nx", anchors=earlier)) + "\n\nwhat next?"
    messages = [system(), user(merged), *tool_round("c1", "ok"), reply("done")]
    figures = PassFigures.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages), carry=0, anchors=200)
    _, anchors = carry_section(
        messages, plan, figures, CompressorOptions(), COUNT, [messages[0], messages[1]]
    )
    assert {"order_7731_x", "HAT136"} <= set(anchors.tools)
    assert anchors.commands == ("make test",)


def test_the_systems_own_paths_come_after_what_the_task_names() -> None:
    """A listing of /etc/passwd names dozens of system directories; newer than the file the
    agent worked on, they still come after it when the room is short."""
    passwd = "\n".join(
        f"{user}:x:{n}:{n}:{user}:/var/{user}:/usr/sbin/nologin"
        for n, user in enumerate(("daemon", "games", "mail", "news", "proxy", "backup"))
    )
    messages = [
        system(),
        user("go"),
        *tool_round("c1", "wrote /srv/app/src/billing_fix.py"),
        *tool_round("c2", passwd),
        user("next"),
    ]
    figures = PassFigures.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=0, anchors=60)
    _, anchors = carry_section(messages, plan, figures, CompressorOptions(), COUNT, [])
    assert anchors.tools[0] == "/srv/app/src/billing_fix.py"
    assert len(anchors.tools) < 8  # the room is short
    assert system_path("/var/spool/lpd") and not system_path("/etc/app.yaml")


def test_an_earlier_handoffs_anchors_are_read_when_newer_turns_fill_the_scan() -> None:
    """The newer turns bring more ids (and commands) than every tier scans: the earlier
    handoff at the region's start is still read, so what it carried competes with them
    instead of being gone."""
    value = "NEEDLE-0c4f0df637"
    earlier = Handoff(
        "## Goal\nfind the flag",
        anchors=AnchorIndex(tools=(value,), meaning=((value, "VAULT_CODE"),)),
    )
    messages: list[Message] = [system(), user(render_handoff(earlier)), reply("On it.")]
    for n in range(12):
        messages.append(user(f"Now look at FUN_{n:04x} and DAT_{n:04x}0001."))
        ids = " ".join(f"DAT_{n:04x}{k:04x}" for k in range(10))
        messages += tool_round(f"c{n}", ids, command=f"decompile FUN_{n:04x}")
        messages.append(reply(f"FUN_{n:04x} calls FUN_{n + 1:04x}."))
    found = anchor_candidates(messages, 1, len(messages), per_tier=3)
    assert value in found.candidates()[2]
    assert found.labels[value] == "VAULT_CODE"


def test_a_setting_is_found_where_the_anchor_scan_does_not_reach() -> None:
    """A `KEY: value` setting in the middle of a long tool output (the scan reads its head and
    tail), and one in an output older than the scan's share of characters: both found, each
    with its key."""
    middle = "\n".join(f"row {k}: nothing notable here" for k in range(400))
    long_output = f"{middle}\nVAULT_CODE: NEEDLE-5e7a11c0d9\n{middle}"
    messages: list[Message] = [system(), user("Find the flag.")]
    messages += tool_round("c0", "HOME=/root\nAPI_TOKEN=tok_8f3a9c2e7d", command="env")
    messages += tool_round("c1", long_output, command="cat notes.txt")
    for n in range(12):  # newer outputs, more than a tier scans
        messages += tool_round(f"d{n}", middle + f"\nDAT_{n:04x}0001", command=f"decompile f{n}")
    found = anchor_candidates(messages, 1, len(messages), per_tier=400)
    tools = found.candidates()[2]
    assert "NEEDLE-5e7a11c0d9" in tools and found.labels["NEEDLE-5e7a11c0d9"] == "VAULT_CODE"
    assert "tok_8f3a9c2e7d" in tools and found.labels["tok_8f3a9c2e7d"] == "API_TOKEN"
