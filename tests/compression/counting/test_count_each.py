"""Counting each message of a pass in one batch: the same counts as one call a message, the
built-in counter's cache looked up and filled once for the batch."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.counting.tokens import RoughCounter, TiktokenCounter, count_each
from compression.engine import TokenCounter
from compression.messages.types import Message

TEXT = st.text(alphabet="ab \n{}é", max_size=12)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": TEXT}),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.none(),
            "tool_calls": st.just([{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]),
        }
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": TEXT, "content": TEXT}),
)


class _OneByOne:
    """A counter of another kind: counted one call a message."""

    def __init__(self) -> None:
        self.calls = 0

    def count_messages(self, messages: Any, tools: Any = None) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        self.calls += 1
        return 7

    def count_text(self, text: str) -> int:
        return len(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(MESSAGE, max_size=12))
def test_a_batch_counts_what_one_call_a_message_counts(messages: list[Any]) -> None:
    one_by_one = TiktokenCounter("o200k_base")
    expected = [one_by_one.count_message(m) for m in messages]
    batched = TiktokenCounter("o200k_base")
    assert count_each(batched, messages) == expected
    assert count_each(batched, messages) == expected  # from its cache now
    assert count_each(RoughCounter(), messages) == [
        RoughCounter().count_message(m) for m in messages
    ]


def test_the_cache_is_read_once_for_the_batch() -> None:
    counter = TiktokenCounter("o200k_base")
    messages: list[Message] = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    count_each(counter, messages)
    assert counter.cache_info()["misses"] == 50
    count_each(counter, [*messages, {"role": "user", "content": "new"}])
    assert counter.cache_info()["hits"] == 50
    assert counter.cache_info()["misses"] == 51


def test_another_counter_is_asked_once_a_message() -> None:
    other = _OneByOne()
    counter: TokenCounter = other
    assert count_each(counter, [{"role": "user", "content": "x"}] * 3) == [7, 7, 7]
    assert other.calls == 3
