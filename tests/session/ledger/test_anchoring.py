"""The ledger anchors a request's uncompressed prompt on the session's previous request only
when the client's messages continue it: the same messages, in order, then new ones."""

from __future__ import annotations

from compression import Message, counter_for_model
from session.ledger.book import _anchored, _Last, full_prompt
from session.ledger.history import History, Tip


def history(n: int) -> list[Message]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"turn {i}"} for i in range(n)]


def figures(messages: list[Message]) -> tuple[int, History]:
    counter = counter_for_model("gpt-4o")
    return full_prompt(1000, messages, messages, None, counter)


def test_a_continued_history_is_anchored_and_an_edited_one_is_not() -> None:
    before = history(40)
    _, first = figures(before)
    last = _Last(5000, 0.0, len(first), Tip(first, 0.0, 0))
    assert last.messages == 40
    grown: list[Message] = [
        *before,
        {"role": "assistant", "content": "more"},
        {"role": "user", "content": "x"},
    ]
    _, continued = figures(grown)
    assert _anchored(last, continued, 99) == 5000 + continued.grown(40)
    for edited_at in (0, 17, 39):
        edited: list[Message] = list(grown)
        edited[edited_at] = {"role": "user", "content": "edited"}
        _, history_ = figures(edited)
        assert _anchored(last, history_, 99) == 99
    reordered: list[Message] = [before[1], before[0], *grown[2:]]
    _, history_ = figures(reordered)
    assert _anchored(last, history_, 99) == 99
    assert _anchored(last, figures(before[:39])[1], 99) == 99
