"""Messages digested and counted once per object: the figures are the plain ones, a message
object seen before is neither hashed nor tokenized again, one with the same content in a new
object is found by the counter's content-keyed cache, and what is held stays in its budget."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.counting.seen import ENTRY_BYTES, SeenMessages
from compression.counting.tokens import RoughCounter, TiktokenCounter, counter_for_model
from compression.messages.digest import message_digests
from compression.messages.types import Message

TEXT = st.text(alphabet="ab \n{}é✓", max_size=40)
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
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=3
            ),
        }
    ),
)


class NotingRough(RoughCounter):
    """The bytes/4 counter, noting every message it really counts."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[Message] = []

    def count_message(self, message: Message) -> int:
        self.counted.append(message)
        return super().count_message(message)


class NotingTiktoken(TiktokenCounter):
    """The tiktoken counter, noting every message it tokenizes (a cache miss)."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.tokenized = 0

    def _count_uncached(self, message: Any) -> int:
        self.tokenized += 1
        return super()._count_uncached(message)


@settings(max_examples=60, deadline=None)
@given(st.lists(MESSAGE, max_size=12), st.booleans())
def test_the_figures_are_the_plain_ones(messages: list[Message], with_tools: bool) -> None:
    seen = SeenMessages()
    counter = counter_for_model("gpt-4o")
    tools: Any = [{"type": "function", "function": {"name": "f"}}] if with_tools else None
    assert seen.digests(messages) == message_digests(messages)
    assert seen.count_messages(counter, messages, tools) == counter.count_messages(messages, tools)
    # Again, found this time: the same figures.
    assert seen.digests(messages) == message_digests(messages)
    assert seen.count_each(counter, messages) == [counter.count_message(m) for m in messages]


def test_a_message_object_seen_before_is_not_counted_again() -> None:
    seen, counter = SeenMessages(), NotingRough()
    history: list[Message] = [{"role": "user", "content": f"message {i} " * 20} for i in range(50)]
    first = seen.count_each(counter, history)
    assert len(counter.counted) == 50
    grown = [*history, {"role": "assistant", "content": "new"}]
    assert seen.count_each(counter, grown) == [*first, counter.count_message(grown[-1])]
    # Only the new message was counted (and once more just above, by hand).
    assert [m["content"] for m in counter.counted[50:]] == ["new", "new"]
    assert seen.hashed == 51


def test_the_same_content_in_a_new_object_is_found_by_the_counters_cache() -> None:
    seen, counter = SeenMessages(), NotingTiktoken()
    history: list[Message] = [{"role": "user", "content": f"message {i} " * 20} for i in range(30)]
    counts = seen.count_each(counter, history)
    assert counter.tokenized == 30
    reparsed = copy.deepcopy(history)  # what a full parse of the same bytes gives
    assert seen.count_each(counter, reparsed) == counts
    assert counter.tokenized == 30


def test_counters_are_kept_apart() -> None:
    seen = SeenMessages()
    rough, tiktoken = RoughCounter(), counter_for_model("gpt-4o")
    history: list[Message] = [{"role": "user", "content": "ééé aaaa bbbb " * 30}]
    assert seen.count_each(rough, history) == [rough.count_message(history[0])]
    assert seen.count_each(tiktoken, history) == [tiktoken.count_message(history[0])]
    assert rough.count_message(history[0]) != tiktoken.count_message(history[0])


def test_what_is_held_stays_within_its_budget() -> None:
    seen, counter = SeenMessages(budget_bytes=20_000), NotingRough()
    messages: list[Message] = [{"role": "user", "content": f"{i:04d}" * 250} for i in range(40)]
    counts = seen.count_each(counter, messages)  # about 1 KB each: 40 KB in all
    assert len(seen) < 20
    assert seen.count_each(counter, messages) == counts  # the evicted ones are counted again
    huge: list[Message] = [{"role": "user", "content": "x" * 30_000}]
    assert seen.count_each(counter, huge) == [counter.count_message(huge[0])]
    assert all(m is not huge[0] for m in seen_objects(seen))


def test_small_messages_are_charged_their_bookkeeping() -> None:
    """100,000 one-word messages are 5 MB of JSON but ~70 MB held: the budget bounds what is
    held, so each entry is charged what keeping it costs, not only its message's bytes."""
    seen, counter = SeenMessages(budget_bytes=70_000), NotingRough()
    words: list[Message] = [{"role": "user", "content": f"w{i}"} for i in range(1_000)]
    seen.count_each(counter, words)
    assert 0 < len(seen) <= 70_000 // ENTRY_BYTES


def seen_objects(seen: SeenMessages) -> list[Any]:
    return [entry.message for entry in seen._entries.values()]


class KeyingTiktoken(TiktokenCounter):
    """The tiktoken counter, noting each batch it counts and whether its cache keys (the
    messages' digests) came with it or had to be worked out again."""

    def __init__(self) -> None:
        super().__init__("o200k_base")
        self.batches: list[tuple[int, bool]] = []

    def _count_cached(self, messages: Any, digests: Any = None) -> list[int]:
        self.batches.append((len(messages), digests is not None))
        return super()._count_cached(messages, digests)


def test_each_message_is_hashed_once_for_the_memo_and_the_counters_cache() -> None:
    seen, counter = SeenMessages(), KeyingTiktoken()
    history: list[Message] = [{"role": "user", "content": f"message {i} " * 20} for i in range(30)]
    assert seen.count_each(counter, history) == [counter.count_message(m) for m in history]
    assert counter.batches[0] == (30, True)  # the memo's digests, not hashed again
    assert seen.hashed == 30
    assert message_digests(history) == seen.digests(history)


@settings(max_examples=40, deadline=None)
@given(st.lists(MESSAGE, max_size=12), st.integers(min_value=0, max_value=12))
def test_digests_unkept_are_the_digests_and_keep_nothing(
    messages: list[Message], known: int
) -> None:
    """The objects it finds give their digests, the others are hashed, and none is kept."""
    seen = SeenMessages()
    seen.digests(messages[:known])
    held = len(seen)
    assert seen.digests_unkept(messages) == message_digests(messages)
    assert len(seen) == held
    assert seen.hashed == min(known, len(messages)) + max(0, len(messages) - known)


def test_digests_unkept_find_the_previous_lists_objects_in_recent() -> None:
    seen = SeenMessages()
    recent: dict[int, tuple[Any, str]] = {}
    first: list[Message] = [{"role": "user", "content": f"message {i}"} for i in range(6)]
    assert seen.digests_unkept(first, recent) == message_digests(first)
    edited: list[Message] = [{"role": "user", "content": "rewritten"}, *first[1:]]
    assert seen.digests_unkept(edited, recent) == message_digests(edited)
    assert seen.hashed == 6 + 1  # only the new object was hashed again
    assert [m for m, _ in recent.values()] == edited and len(seen) == 0
