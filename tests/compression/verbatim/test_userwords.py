"""Which user messages a handoff carries, whole or clipped, when their budget binds."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from compression.verbatim.userwords import (
    MIN_CLIP_TOKENS,
    ORIGIN_CLIP_TOKENS,
    Carried,
    Selection,
    mark_superseded,
    priority,
    select_carried,
)
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def texts(*names: str) -> list[Carried]:
    return [Carried(name, 10, index=i) for i, name in enumerate(names)]


def test_everything_is_carried_verbatim_when_it_fits() -> None:
    chosen = select_carried(texts("a", "b", "c", "d", "e"), 1_000, COUNT)
    assert chosen == Selection(("a", "b", "c", "d", "e"))
    assert chosen.complete


def test_the_order_is_original_request_then_instructions_then_the_rest_newest_first() -> None:
    candidates = [
        Carried("origin", 10, opening=True),
        Carried("never push to main", 10, instruction=True),
        Carried("a", 10),
        Carried("from now on use tabs", 10, instruction=True),
        Carried("b", 10),
    ]
    assert priority(candidates) == [0, 3, 1, 4, 2]


def test_when_the_budget_binds_instructions_stay_whole_and_the_rest_is_clipped() -> None:
    chatter = "let us look at the parser next " * 40  # 1,240 characters: 310 tokens
    candidates = [
        Carried("origin", 10, opening=True, index=1),
        Carried("never push to main", 20, instruction=True, index=3),
        Carried(chatter, index=5),
        Carried("from now on use tabs", 20, instruction=True, index=7),
        Carried(chatter.upper(), index=9),
    ]
    chosen = select_carried(candidates, 300, COUNT)  # 50 for the short ones, 250 for the clips
    assert chosen.texts[:2] == ("origin", "never push to main")
    assert chosen.texts[3] == "from now on use tabs"
    assert [c.instruction for c in chosen.shortened] == [False, False]
    assert [c.index for c in chosen.shortened] == [5, 9]
    for clipped, original in ((chosen.texts[2], chatter), (chosen.texts[4], chatter.upper())):
        assert "chars omitted" in clipped and _clips(clipped, original)
    assert sum(COUNT(text) for text in chosen.texts) <= 300


def test_an_instruction_is_clipped_before_it_is_left_out() -> None:
    rule = "From now on, never " + "x" * 2_400 + " and commit."  # 608 tokens
    candidates = [Carried("origin", 10, opening=True), Carried(rule, instruction=True, index=4)]
    chosen = select_carried(candidates, 200, COUNT)
    assert chosen.texts[0] == "origin"
    assert _clips(chosen.texts[1], rule)
    assert chosen.shortened[0].index == 4 and 0 < chosen.shortened[0].kept <= 190
    assert chosen.shortened[0].original == COUNT(rule)


def test_what_cannot_even_be_clipped_is_reported_as_left_out() -> None:
    candidates = [Carried("origin " * 30, opening=True, index=0), Carried("b" * 300, index=2)]
    chosen = select_carried(candidates, MIN_CLIP_TOKENS - 1, COUNT)
    assert chosen.texts == ()
    assert [(c.index, c.kept, c.original) for c in chosen.shortened] == [(0, 0, 53), (2, 0, 75)]


def test_a_long_original_request_is_clipped_to_half_the_budget() -> None:
    ask = "Fix the parser. " + "context " * 400 + "Never touch main.py."
    chosen = select_carried([Carried(ask, opening=True), *texts("b")], 300, COUNT)
    clipped = chosen.texts[0]
    assert clipped.startswith("Fix the parser.") and clipped.endswith("Never touch main.py.")
    assert "chars omitted" in clipped
    assert COUNT(clipped) <= 150
    assert chosen.texts[1:] == ("b",)


def test_the_original_request_takes_at_least_its_first_lines() -> None:
    """Where half the budget is less than `ORIGIN_CLIP_TOKENS`, the original request takes
    that much (its first lines say what the task is), or what the budget holds of it."""
    ask = "x" * 4_000
    chosen = select_carried([Carried(ask, opening=True), *texts("b")], 150, COUNT)
    assert ORIGIN_CLIP_TOKENS - 12 <= COUNT(chosen.texts[0]) <= ORIGIN_CLIP_TOKENS
    chosen = select_carried([Carried(ask, opening=True), *texts("b")], 60, COUNT)
    assert 48 <= COUNT(chosen.texts[0]) <= 60
    assert select_carried([Carried(ask, opening=True)], 40, COUNT).texts == ()


def test_the_original_request_is_whole_where_the_later_instructions_fit_beside_it() -> None:
    """Past half the budget, the original request is still carried whole when the later
    instruction-bearing messages fit whole beside it: plain later messages (a remark, output
    a harness sent as the user's) do not clip the task statement, and a long opening (an
    agent's worked demonstration) does not clip the later tasks."""
    ask = "Fix the parser. " + "context " * 95 + "Never touch main.py."  # 199 tokens
    rule = "From now on, never " + "x" * 200 + " and commit."  # 58 tokens
    candidates = [
        Carried(ask, opening=True, index=1),
        *texts("plain " * 60),
        Carried(rule, instruction=True, index=5),
    ]
    chosen = select_carried(candidates, 300, COUNT)
    assert chosen.texts[0] == ask and chosen.texts[-1] == rule
    # Where the instruction would not fit whole beside it, the request is clipped to half.
    tight = select_carried(candidates, 240, COUNT)
    assert _clips(tight.texts[0], ask) and COUNT(tight.texts[0]) <= 120
    assert tight.texts[-1] == rule


def test_messages_the_view_holds_verbatim_are_not_repeated() -> None:
    candidates = [
        Carried("origin", 10, opening=True),
        Carried("only use tabs", 10, instruction=True),
        *texts("quoted", "new"),
    ]
    quoted = {"origin", "quoted"}
    chosen = select_carried(candidates, 1_000, COUNT, present=quoted.__contains__)
    assert chosen.texts == ("only use tabs", "new") and chosen.complete


def test_the_delimiters_count_against_the_budget() -> None:
    assert select_carried(texts("a", "b", "c"), 30, COUNT).texts == ("a", "b", "c")
    assert select_carried(texts("a", "b", "c"), 30, COUNT, overhead=5).texts == ("b", "c")


def test_duplicates_are_carried_once() -> None:
    assert select_carried(texts("a", "x", "x"), 1_000, COUNT).texts == ("a", "x")


CANDIDATE = st.builds(
    Carried,
    text=st.text(alphabet="abcdefgh \n", min_size=1, max_size=400),
    tokens=st.none(),
    instruction=st.booleans(),
    opening=st.just(False),
)


@st.composite
def candidate_lists(draw: st.DrawFn) -> list[Carried]:
    found = draw(st.lists(CANDIDATE, max_size=14, unique_by=lambda c: c.text))
    opening = draw(st.integers(0, min(2, len(found))))
    marked = [replace(c, opening=True) for c in found[:opening]] + found[opening:]
    return [replace(c, index=i) for i, c in enumerate(marked)]


@given(
    candidates=candidate_lists(),
    budget=st.integers(0, 600),
    overhead=st.integers(0, 12),
    quoted=st.sets(st.text(alphabet="abcdefgh \n", min_size=1, max_size=40), max_size=3),
)
def test_selection_is_bounded_ordered_faithful_and_accounts_for_every_message(
    candidates: list[Carried], budget: int, overhead: int, quoted: set[str]
) -> None:
    chosen = select_carried(candidates, budget, COUNT, overhead, quoted.__contains__)
    assert chosen == select_carried(candidates, budget, COUNT, overhead, quoted.__contains__)
    assert sum(COUNT(text) + overhead for text in chosen.texts) <= budget
    positions = []
    for text in chosen.texts:
        whole = [i for i, c in enumerate(candidates) if c.text == text]
        clipped = [i for i, c in enumerate(candidates) if _clips(text, c.text)]
        assert whole or clipped, text
        positions.append((whole or clipped)[0])
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Every candidate is carried whole, quoted elsewhere, or reported as shortened.
    reported = {c.index for c in chosen.shortened}
    for i, candidate in enumerate(candidates):
        carried_whole = candidate.text in chosen.texts
        assert carried_whole or quoted.__contains__(candidate.text) or i in reported
    # An instruction goes without even a clip only when nothing after it in priority is kept.
    if any(c.instruction and c.kept == 0 for c in chosen.shortened):
        rest = [c.text for c in candidates if not c.instruction and not c.opening]
        assert not any(_carried(text, chosen) for text in rest)


def _carried(text: str, chosen: Selection) -> bool:
    return any(t == text or _clips(t, text) for t in chosen.texts)


def _clips(clipped: str, original: str) -> bool:
    head, _, rest = clipped.partition("\n…[")
    tail = rest.split("omitted]…\n", 1)[-1] if "omitted]…\n" in rest else ""
    return "chars omitted" in clipped and original.startswith(head) and original.endswith(tail)


def test_a_message_taken_back_goes_last() -> None:
    candidates = [
        Carried("origin", 10, opening=True),
        Carried("always use PostgreSQL", 10, instruction=True, superseded=True),
        Carried("how long will it take?", 10),
        Carried("forget the earlier instruction: SQLite is fine", 10, instruction=True),
    ]
    assert priority(candidates) == [0, 3, 2, 1]
    # Room for three of the four: the one taken back is what goes.
    chosen = select_carried(candidates, 35, COUNT)
    assert "always use PostgreSQL" not in chosen.texts and len(chosen.texts) == 3
    assert [(c.kept, c.instruction) for c in chosen.shortened] == [(0, True)]
    # Not taken back, the instruction would have stayed and the question gone.
    kept = select_carried([replace(c, superseded=False) for c in candidates], 35, COUNT)
    assert "always use PostgreSQL" in kept.texts and "how long will it take?" not in kept.texts


def test_what_a_later_message_takes_back() -> None:
    origin = Carried("origin: build the importer", opening=True, index=1)
    rule = Carried("always use PostgreSQL", instruction=True, index=3)
    ask = Carried("how long will it take?", index=5)
    found = mark_superseded([origin, rule, ask, "forget the earlier instruction, use SQLite"])
    assert [c.superseded for c in found] == [False, True, False]
    found = mark_superseded([origin, rule, ask, "Ignore my previous message."])
    assert [c.superseded for c in found] == [False, False, True]
    # The message just before is kept in view anyway (a string): nothing in the handoff goes.
    found = mark_superseded([origin, rule, "kept in view", "Ignore my previous message."])
    assert [c.superseded for c in found] == [False, False]
    # The original request is never taken back this way.
    assert not mark_superseded([origin, Carried("scratch that", index=3)])[0].superseded


@given(
    st.lists(
        st.sampled_from(["a", "never x", "ignore my last message", "forget the earlier rule"]),
        max_size=8,
    )
)
def test_marking_keeps_every_candidate_in_order(words: list[str]) -> None:
    candidates = [
        Carried(w, instruction=w != "a", opening=i == 0, index=i) for i, w in enumerate(words)
    ]
    marked = mark_superseded(candidates)
    assert [replace(c, superseded=False) for c in marked] == candidates
    assert not any(c.superseded for c in marked if c.opening)
    assert sorted(priority(marked)) == list(range(len(marked)))
