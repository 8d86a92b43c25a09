"""The ledger anchors a request's uncompressed prompt on the session's previous request only
when the client's messages continue it: the same messages, in order, then new ones."""

from __future__ import annotations

from compression import Message, counter_for_model, seen_messages
from session.ledger.book import _anchored, _Last, _tip, full_prompt


def history(n: int) -> list[Message]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"turn {i}"} for i in range(n)]


def figures(messages: list[Message]) -> tuple[int, object]:
    counter = counter_for_model("gpt-4o")
    digests = seen_messages().digests(messages)
    return full_prompt(1000, messages, messages, None, counter, (), digests)


def test_a_continued_history_is_anchored_and_an_edited_one_is_not() -> None:
    before = history(40)
    _, first = figures(before)
    last = _Last(5000, 0.0, *_tip(first))  # type: ignore[arg-type]
    assert last.messages == 40
    grown = [*before, {"role": "assistant", "content": "more"}, {"role": "user", "content": "x"}]
    _, continued = figures(grown)
    assert _anchored(last, continued, 99) == 5000 + continued.grown(40)  # type: ignore[attr-defined]
    for edited_at in (0, 17, 39):
        edited = list(grown)
        edited[edited_at] = {"role": "user", "content": "edited"}
        _, history_ = figures(edited)
        assert _anchored(last, history_, 99) == 99  # type: ignore[arg-type]
    reordered = [before[1], before[0], *grown[2:]]
    _, history_ = figures(reordered)
    assert _anchored(last, history_, 99) == 99  # type: ignore[arg-type]
    assert _anchored(last, figures(before[:39])[1], 99) == 99  # type: ignore[arg-type]
