"""Rendering a compressed Messages view: untouched fields, breakpoints across checkpoints."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest

from compression.messages.types import Message
from proxy.doors.messages.cache import breakpoints
from proxy.doors.messages.messages_door import MessagesDoor
from proxy.doors.messages.request import session_hint
from session.errors import BadRequest

MARK = {"type": "ephemeral"}
SYSTEM = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": MARK},
    {"type": "text", "text": "Project notes.", "cache_control": MARK},
]
DOOR = MessagesDoor()


def _history(rounds: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Run the commands."}]
    for n in range(rounds):
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"c": n}}
        out.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"out {n}"}
        out.append({"role": "user", "content": [result]})
    return out


def _body(messages: list[dict[str, Any]]) -> bytes:
    """Claude Code's request: its marker on the last block of the last message only."""
    marked = [dict(m) for m in messages]
    last = marked[-1]
    last["content"] = [*last["content"][:-1], {**last["content"][-1], "cache_control": MARK}]
    body = {
        "model": "claude-x",
        "max_tokens": 32000,
        "system": SYSTEM,
        "messages": marked,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"session_id": "s-1"}'},
        "stream": True,
    }
    return orjson.dumps(body)


def test_unchanged_view_is_the_clients_bytes() -> None:
    raw = _body(_history(3))
    request = DOOR.parse(raw)
    assert request.session_hint == "s-1"
    assert DOOR.render(request, request.messages, None) is raw


def test_breakpoints_stay_four_across_a_checkpoint() -> None:
    first = DOOR.parse(_body(_history(6)))
    summary = cast(Message, {"role": "user", "content": "SUMMARY of rounds 0-3"})
    # head (system) + summary + the tail from round 4 on, as the compressor builds it
    tail_start = 1 + 1 + 2 * 4
    view = [first.messages[0], summary, *first.messages[tail_start:]]
    sent = orjson.loads(DOOR.render(first, view, None))
    assert breakpoints(sent["system"], sent["messages"], None) == 4
    assert sent["messages"][0]["content"][0]["cache_control"] == MARK
    for key in ("thinking", "context_management", "metadata", "max_tokens", "stream"):
        assert sent[key] == orjson.loads(first.raw)[key]

    checkpoint = orjson.loads(orjson.dumps(view))  # as storage keeps it
    later = DOOR.parse(_body(_history(8)))
    replaced = len(first.messages)  # the checkpoint covers the first request's messages
    view2 = [*checkpoint, *later.messages[replaced:]]
    sent2 = orjson.loads(DOOR.render(later, view2, None))
    assert breakpoints(sent2["system"], sent2["messages"], None) == 4
    assert sent2["messages"][-1]["content"][-1]["cache_control"] == MARK
    # the rewritten prefix is rendered the same way both times: the cache can read it
    assert sent2["messages"][: len(sent["messages"]) - 1] == sent["messages"][:-1]
    assert "_ctxgate_original" not in orjson.dumps(sent2).decode()


def test_overflow_recovery_lowers_max_tokens_only() -> None:
    request = DOOR.parse(_body(_history(2)))
    sent = orjson.loads(DOOR.render(request, request.messages, 4000))
    assert sent["max_tokens"] == 4000
    assert sent["messages"] == orjson.loads(request.raw)["messages"]


@pytest.mark.parametrize(
    ("user_id", "hint"),
    [
        ('{"device_id": "d1", "session_id": "0b1c-22"}', "0b1c-22"),
        ("user_ab12_account_9f8e_session_1234abcd-5678-90ef", "1234abcd-5678-90ef"),
        ('{"device_id": "d1"}', None),
        ("", None),
    ],
)
def test_session_hint_from_metadata_user_id(user_id: str, hint: str | None) -> None:
    assert session_hint({"user_id": user_id}) == hint


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "model"),
        ({"model": "m", "messages": {}}, "messages"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
        ({"model": "m", "messages": [], "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": [], "stream": "yes"}, "stream"),
    ],
)
def test_malformed_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        DOOR.parse(orjson.dumps(body))
    assert caught.value.param == param


def test_a_body_without_messages_passes_through() -> None:
    request = DOOR.parse(b'{"model": "m", "messages": [], "max_tokens": 5}')
    assert request.passthrough == "no messages"


@pytest.mark.parametrize(
    ("max_tokens", "thinking"),
    [
        (6000, {"type": "enabled", "budget_tokens": 3000}),
        (1500, {"type": "enabled", "budget_tokens": 1024}),
        (900, {"type": "disabled"}),
        (40000, {"type": "enabled", "budget_tokens": 31999}),
    ],
)
def test_a_lowered_max_tokens_keeps_the_thinking_budget_below_it(
    max_tokens: int, thinking: dict[str, Any]
) -> None:
    """The API refuses `budget_tokens` ≥ `max_tokens`; Claude Code asks 32,000 / 31,999."""
    raw = orjson.dumps(
        {
            "model": "claude-x",
            "max_tokens": 32000,
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    request = DOOR.parse(raw)
    body = orjson.loads(DOOR.render(request, request.messages, max_tokens))
    assert body["max_tokens"] == max_tokens
    assert body["thinking"] == thinking
