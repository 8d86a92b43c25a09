from __future__ import annotations

import copy

import pytest

from compression.assembly.invariants import CompressionInvariantError, check_invariants
from compression.messages.toolpairs import (
    REMOVED_CALL_TEXT,
    group_start,
    pair_tool_calls,
    sanitize_tool_pairs,
)
from compression.messages.types import Message
from tests.compression.builders import call, calls, reply, result, system, user


def reused_ids() -> list[Message]:
    return [
        system(),
        user("book it"),
        calls(call("call_1", "get_user")),
        result("call_1", "user data"),
        calls(call("call_1", "book")),  # the id is reused by a later turn
        result("call_1", "booked"),
        reply("done"),
    ]


def test_results_pair_by_position_and_id_when_ids_are_reused() -> None:
    pairing = pair_tool_calls(reused_ids())
    assert pairing.owner == {3: (2, 0), 5: (4, 0)}
    assert pairing.in_flight is None


def test_parallel_calls_answered_in_any_order() -> None:
    messages = [user("go"), calls(call("a"), call("b")), result("b", "B"), result("a", "A")]
    pairing = pair_tool_calls(messages)
    assert pairing.owner == {2: (1, 1), 3: (1, 0)}
    check_invariants(messages)


def test_a_result_after_another_turn_is_an_orphan() -> None:
    messages = [user("go"), calls(call("a")), user("interrupt"), result("a", "late")]
    assert 3 not in pair_tool_calls(messages).owner
    with pytest.raises(CompressionInvariantError, match="answers no pending call"):
        check_invariants(
            [user("go"), calls(call("a")), result("a", "A"), user("x"), result("a", "late")]
        )


def test_group_start_moves_a_cut_back_to_the_owning_assistant() -> None:
    messages = reused_ids()
    pairing = pair_tool_calls(messages)
    assert group_start(messages, pairing, 5) == 4
    assert group_start(messages, pairing, 3) == 2
    assert group_start(messages, pairing, 6) == 6


def test_sanitize_drops_orphan_results_and_unanswered_calls() -> None:
    messages = [
        system(),
        result("ghost", "no call"),
        user("go"),
        calls(call("a"), call("b"), text="trying two"),
        result("a", "A"),
        user("next"),
        calls(call("c")),
        user("again"),
    ]
    before = copy.deepcopy(messages)
    repaired = sanitize_tool_pairs(messages)
    assert messages == before
    assert [m["role"] for m in repaired] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "user",
    ]
    assert [c["id"] for c in repaired[2]["tool_calls"]] == ["a"]
    assert "tool_calls" not in repaired[5]
    assert repaired[5]["content"] == REMOVED_CALL_TEXT
    assert repaired[2]["content"] == "trying two"
    check_invariants(repaired)


def test_sanitize_keeps_the_in_flight_assistant_calls() -> None:
    messages = [user("go"), calls(call("a"), call("b")), result("a", "A")]
    repaired = sanitize_tool_pairs(messages)
    assert repaired == messages
    assert repaired[1] is messages[1]
    check_invariants(repaired)


def test_sanitize_reuses_untouched_messages() -> None:
    messages = reused_ids()
    assert all(a is b for a, b in zip(sanitize_tool_pairs(messages), messages, strict=True))


def test_invariants_reject_empty_lists_and_late_system_messages() -> None:
    with pytest.raises(CompressionInvariantError, match="empty"):
        check_invariants([])
    with pytest.raises(CompressionInvariantError, match="system message is not first"):
        check_invariants([user("hi"), system()])
    check_invariants([{"role": "developer", "content": "rules"}, system(), user("hi")])


def test_invariants_reject_an_unanswered_call_before_the_next_turn() -> None:
    with pytest.raises(CompressionInvariantError, match="has no result"):
        check_invariants([user("go"), calls(call("a")), user("next")])


def test_invariants_reject_a_second_answer_to_one_call() -> None:
    with pytest.raises(CompressionInvariantError):
        check_invariants([user("go"), calls(call("a")), result("a", "1"), result("a", "2")])
