from __future__ import annotations

from compression.carry import Carried, carry_candidates, select_carried
from compression.handoff import Handoff, render_handoff
from compression.ledger import Ledger
from tests.compression.builders import reply, system, user
from tests.compression.counters import CharCounter

COUNT = CharCounter().count_text


def texts(*names: str) -> list[Carried]:
    return [Carried(name, 10) for name in names]


def test_newest_first_within_the_count_emitted_oldest_first() -> None:
    assert select_carried(texts("a", "b", "c", "d", "e"), 3, 1_000, COUNT) == ("a", "d", "e")


def test_the_origin_keeps_its_place_only_when_it_fits_half_the_budget() -> None:
    candidates = [Carried("origin", 60), *texts("b", "c")]
    assert select_carried(candidates, 5, 75, COUNT) == ("b", "c")
    assert select_carried(candidates, 5, 130, COUNT) == ("origin", "b", "c")


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
        user("third ask"),
        user("   "),
        user("newest"),
    ]
    ledger = Ledger.measure(messages, CharCounter(), None)
    found = carry_candidates(messages, 1, 6, 5, ledger)
    assert [c.text for c in found] == ["first ask", "second ask", "third ask"]
