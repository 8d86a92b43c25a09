"""Cache breakpoints on a rewritten Messages view, and the clamped output reservation."""

from __future__ import annotations

import copy
from typing import Any, cast

from proxy.doors.messages.cache import breakpoints, place_breakpoints
from proxy.doors.messages.wire_types import WireMessage
from session.turn import output_reservation

MARK = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def _messages(*contents: Any) -> list[WireMessage]:
    roles = ["user", "assistant"]
    return [cast(WireMessage, {"role": roles[i % 2], "content": c}) for i, c in enumerate(contents)]


def test_claude_code_marks_stay_and_the_fourth_goes_to_the_rewritten_end() -> None:
    system = [
        {"type": "text", "text": "a", "cache_control": MARK},
        {"type": "text", "text": "b", "cache_control": HOUR},
    ]
    messages = _messages(
        "SUMMARY",
        [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "ok"}],
        [{"type": "text", "text": "next", "cache_control": HOUR}],
    )
    before = copy.deepcopy(messages)
    out_system, out = place_breakpoints(system, messages, None, 0)
    assert out_system is system
    assert messages == before  # inputs untouched
    assert out[0]["content"] == [{"type": "text", "text": "SUMMARY", "cache_control": HOUR}]
    assert out[1:] == messages[1:]
    assert breakpoints(out_system, out, None) == 4


def test_no_fifth_breakpoint_and_no_second_on_a_marked_message() -> None:
    tools = [{"name": "Bash", "cache_control": MARK}]
    system = [{"type": "text", "text": "a", "cache_control": MARK}]
    messages = _messages(
        [{"type": "text", "text": "x", "cache_control": MARK}],
        "y",
        [{"type": "text", "text": "z", "cache_control": MARK}],
    )
    assert place_breakpoints(system, messages, tools, 1) == (system, messages)
    three = messages[:1] + messages[1:]
    _, out = place_breakpoints(None, three, None, 0)
    assert out == three


def test_a_client_without_breakpoints_gets_system_and_3() -> None:
    messages = _messages("one", "two", "three", [{"type": "text", "text": "four"}])
    system, out = place_breakpoints("Be brief.", messages, None, 0)
    assert system == [{"type": "text", "text": "Be brief.", "cache_control": MARK}]
    assert out[0] == messages[0]
    assert [m["content"][-1]["cache_control"] for m in out[1:]] == [MARK] * 3  # type: ignore[index]
    assert breakpoints(system, out, None) == 4


def test_thinking_blocks_are_never_marked() -> None:
    thinking = [{"type": "thinking", "thinking": "t", "signature": "s"}]
    messages = _messages("q", thinking)
    _, out = place_breakpoints(None, messages, None, 1)
    assert out[1] == messages[1]
    assert out[0]["content"] == [{"type": "text", "text": "q", "cache_control": MARK}]


def test_output_reservation_is_clamped_to_a_share_of_the_window() -> None:
    assert output_reservation(32_000, 16_384) == 4096
    assert output_reservation(1_000, 16_384) == 1_000
    assert output_reservation(None, 200_000) is None
