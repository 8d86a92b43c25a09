from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from compression.carry import Carried, carry_candidates, carry_section, select_carried
from compression.handoff import Handoff, render_handoff
from compression.ledger import Ledger
from compression.options import CompressorOptions
from compression.planning import Budgets, CutPlan
from compression.types import Message
from tests.compression.builders import reply, system, tool_round, user
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def texts(*names: str) -> list[Carried]:
    return [Carried(name, 10) for name in names]


def test_newest_first_within_the_count_emitted_oldest_first() -> None:
    assert select_carried(texts("a", "b", "c", "d", "e"), 3, 1_000, COUNT) == ("c", "d", "e")


def test_the_original_request_keeps_its_place() -> None:
    candidates = [Carried("origin", 10, opening=True), *texts("b", "c", "d")]
    assert select_carried(candidates, 3, 1_000, COUNT) == ("origin", "c", "d")


def test_a_long_original_request_is_clipped_to_half_the_budget() -> None:
    ask = "Fix the parser. " + "context " * 400 + "Never touch main.py."
    chosen = select_carried([Carried(ask, opening=True), *texts("b")], 5, 300, COUNT)
    clipped = chosen[0]
    assert clipped.startswith("Fix the parser.") and clipped.endswith("Never touch main.py.")
    assert "chars omitted" in clipped
    assert COUNT(clipped) <= 150
    assert chosen[1:] == ("b",)


def test_the_original_request_takes_at_least_a_short_clip_else_nothing() -> None:
    ask = "x" * 4_000
    chosen = select_carried([Carried(ask, opening=True), *texts("b")], 5, 60, COUNT)
    assert 40 <= COUNT(chosen[0]) <= 48 and chosen[1:] == ("b",)
    assert select_carried([Carried(ask, opening=True), *texts("b")], 5, 40, COUNT) == ("b",)


def test_an_opening_that_does_not_fit_gives_way_to_its_ask() -> None:
    demonstration = Carried("demo " * 2_000, opening=True)
    task = Carried("Solve issue 42 without new dependencies.", opening=True)
    chosen = select_carried([demonstration, task, *texts("b")], 5, 200, COUNT)
    assert chosen == (task.text, "b")


def test_the_earliest_constraints_come_before_newer_chatter() -> None:
    candidates = [
        Carried("origin", 10, opening=True),
        Carried("never push to main", 10, constraint=True),
        *texts("c", "d", "e", "f"),
    ]
    assert select_carried(candidates, 4, 1_000, COUNT) == (
        "origin",
        "never push to main",
        "e",
        "f",
    )


def test_messages_the_summary_quotes_are_not_repeated_but_constraints_are() -> None:
    candidates = [
        Carried("origin", 10, opening=True),
        Carried("only use tabs", 10, constraint=True),
        *texts("quoted", "new"),
    ]
    quoted = {"origin", "only use tabs", "quoted"}
    chosen = select_carried(candidates, 5, 1_000, COUNT, present=quoted.__contains__)
    assert chosen == ("origin", "only use tabs", "new")


def test_the_delimiters_count_against_the_budget() -> None:
    assert select_carried(texts("a", "b", "c"), 5, 30, COUNT) == ("a", "b", "c")
    assert select_carried(texts("a", "b", "c"), 5, 30, COUNT, overhead=5) == ("b", "c")


def test_token_bound_skips_what_does_not_fit_but_keeps_looking() -> None:
    candidates = [Carried("old", 5), Carried("huge", 500), Carried("new", 5)]
    assert select_carried(candidates, 5, 100, COUNT) == ("old", "new")


def test_duplicates_are_carried_once() -> None:
    assert select_carried(texts("a", "x", "x"), 5, 1_000, COUNT) == ("a", "x")


def test_zero_bounds_carry_nothing() -> None:
    assert select_carried(texts("a"), 0, 1_000, COUNT) == ()
    assert select_carried(texts("a"), 3, 0, COUNT) == ()


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
    ledger = Ledger.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 6, 5, ledger)
    assert [c.text for c in found] == ["first ask", "second ask", "third ask: never use eval"]
    assert [c.opening for c in found] == [True, False, False]
    assert [c.constraint for c in found] == [False, False, True]


def test_a_message_the_summary_was_merged_into_is_not_the_original_request() -> None:
    merged = render_handoff(Handoff("## Goal\nx", ("first ask",))) + "\n\nwhat next?"
    output = render_handoff(Handoff("## Goal\nx")) + "\n\n<returncode>0</returncode>\nok"
    messages = [system(), user(merged), reply("ok"), user(output)]
    ledger = Ledger.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 4, None, ledger)
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
    ledger = Ledger.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, len(messages), None, ledger)
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
    ledger = Ledger.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=200, anchors=60)
    tail = messages[-1:]
    users, anchors = carry_section(
        messages, plan, ledger, CompressorOptions(), COUNT, [*messages[:1], *tail, "summary"]
    )
    assert users == ("Book flight HAT136 for user mia_li_3668; never use the 7447 card.",)
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
    ledger = Ledger.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=0, anchors=120)
    _, anchors = carry_section(
        messages, plan, ledger, CompressorOptions(), COUNT, ["summary names rec_0199_x"]
    )
    assert anchors.tools[0] == "rec_0198_x"  # newest first, the quoted one skipped
    assert sum(COUNT(value + ", ") for value in anchors.tools) <= 120


def test_no_room_means_no_anchors() -> None:
    messages = [system(), user("go"), *tool_round("c1", "id abc_12345"), user("next")]
    ledger = Ledger.measure(messages, CharCounter(), None)
    plan = plan_for(messages, len(messages) - 1, carry=0, anchors=0)
    assert not carry_section(messages, plan, ledger, CompressorOptions(), COUNT, [])[1]


CANDIDATE = st.builds(
    Carried,
    text=st.text(alphabet="abcdefgh \n", min_size=1, max_size=400),
    tokens=st.none(),
    constraint=st.booleans(),
    opening=st.just(False),
)


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Carried]:
    found = draw(st.lists(CANDIDATE, max_size=14, unique_by=lambda c: c.text))
    opening = draw(st.integers(0, min(2, len(found))))
    return [replace(c, opening=True) for c in found[:opening]] + found[opening:]


@given(
    candidates=candidate_lists(),
    max_count=st.integers(0, 8),
    budget=st.integers(0, 400),
    overhead=st.integers(0, 12),
    quoted=st.sets(st.text(alphabet="abcdefgh \n", min_size=1, max_size=40), max_size=3),
)
def test_selection_is_bounded_ordered_verbatim_and_deterministic(
    candidates: list[Carried], max_count: int, budget: int, overhead: int, quoted: set[str]
) -> None:
    chosen = select_carried(candidates, max_count, budget, COUNT, overhead, quoted.__contains__)
    assert chosen == select_carried(
        candidates, max_count, budget, COUNT, overhead, quoted.__contains__
    )
    assert len(chosen) <= max_count
    assert sum(COUNT(text) + overhead for text in chosen) <= budget
    texts_ = [c.text for c in candidates]
    positions = []
    for text in chosen:
        if text in texts_:
            positions.append(texts_.index(text))
        else:  # only the original request is ever clipped, and keeps its head and tail
            clipped = [i for i, c in enumerate(candidates) if c.opening and _clips(text, c.text)]
            assert clipped, text
            positions.append(clipped[0])
    assert positions == sorted(positions) and len(set(chosen)) == len(chosen)


def _clips(clipped: str, original: str) -> bool:
    head, _, rest = clipped.partition("\n…[")
    tail = rest.split("omitted]…\n", 1)[-1] if "omitted]…\n" in rest else ""
    return "chars omitted" in clipped and original.startswith(head) and original.endswith(tail)
