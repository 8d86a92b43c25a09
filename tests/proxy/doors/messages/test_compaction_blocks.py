"""Anthropic compaction blocks in the Messages door's conversion (pure): the history is cut at
the newest compaction block, the turn that holds it is one fixed-head message whose size is
what the provider reads, the messages before it are no chat message at all, and rendering
gives the client's bytes back, also when the conversation after the turn was rewritten."""

from __future__ import annotations

from typing import Any

import orjson

from compression.verbatim.preamble import system_end
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.messages.blocks import render_view, to_chat
from proxy.doors.messages.compaction_blocks import compaction_cut, dead_prefix
from proxy.doors.messages.messages_door import MessagesDoor
from proxy.doors.messages.request import read_body

COMPACTION = {
    "type": "compaction",
    "content": "<summary>The user is fixing the parser; tests in t/ pass.</summary>",
    "encrypted_content": "ZW5jcnlwdGVk",
    "signature": "c2lnbmF0dXJl",
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(n: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"ls {n}"}}


def result(n: int, text: str = "a.py b.py") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": text}


def history(*, with_calls: bool) -> list[dict[str, Any]]:
    dead = [
        user("Fix the parser."),
        {"role": "assistant", "content": [call(1)]},
        {"role": "user", "content": [result(1, "x" * 4000)]},
    ]
    turn_blocks: list[dict[str, Any]] = [{"type": "text", "text": "dead text"}, COMPACTION]
    turn_blocks += [call(2)] if with_calls else [{"type": "text", "text": "Carrying on."}]
    after: list[dict[str, Any]] = [{"role": "assistant", "content": turn_blocks}]
    if with_calls:
        after.append({"role": "user", "content": [result(2), {"type": "text", "text": "Go on."}]})
    else:
        after.append(user("Go on."))
    after += [{"role": "assistant", "content": [call(3)]}, {"role": "user", "content": [result(3)]}]
    return dead + after


def test_the_cut_is_the_newest_compaction_block_with_content() -> None:
    messages = history(with_calls=False)
    assert compaction_cut(messages) == (3, 1)
    assert dead_prefix(messages) == messages[:3]
    failed = {"type": "compaction", "content": None}  # a failed compaction cuts nothing
    later = [*messages, {"role": "assistant", "content": [failed, {"type": "text", "text": "ok"}]}]
    assert compaction_cut(later) == (3, 1)
    assert compaction_cut([user("hi")]) is None and dead_prefix("nonsense") == []


def test_the_compaction_turn_is_the_fixed_head_and_the_dead_are_not_in_the_view() -> None:
    messages = history(with_calls=False)
    chat = to_chat("You are a coding agent.", messages)
    assert system_end(chat) == 2  # the system prompt and the compaction turn
    head = chat[1]
    assert head["content"] == COMPACTION["content"] + "\nCarrying on."  # what the API reads
    assert [m["role"] for m in chat[2:]] == ["user", "assistant", "tool"]
    assert "x" * 4000 not in orjson.dumps(chat).decode()  # the dead result is not counted
    rendered = render_view(chat, dead_prefix(messages))
    assert rendered.system == "You are a coding agent."
    assert orjson.dumps(rendered.messages) == orjson.dumps(messages)


def test_the_results_answering_the_turns_calls_travel_with_it() -> None:
    messages = history(with_calls=True)
    chat = to_chat(None, messages)
    assert system_end(chat) == 1
    assert "ls 2" in chat[0]["content"] and "a.py b.py" in chat[0]["content"]
    # The rest of that user message is an ordinary message; no result lost its call.
    assert chat[1]["role"] == "user"
    assert chat[1]["content"] == [{"type": "text", "text": "Go on."}]
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool"]
    rendered = render_view(chat, dead_prefix(messages))
    assert orjson.dumps(rendered.messages) == orjson.dumps(messages)


def test_a_rewritten_conversation_keeps_the_turn_and_the_dead_as_they_came() -> None:
    """What a compression does to the view (the middle replaced by a summary, the tail kept):
    the compaction turn and everything before it reach the provider unchanged."""
    messages = history(with_calls=True)
    chat = to_chat("sys", messages)
    summary = {"role": "user", "content": "CONTEXT COMPACTION: the user asked to go on."}
    view = [*chat[:2], summary, *chat[3:]]
    rendered = render_view(view, dead_prefix(messages))
    sent = rendered.messages
    assert sent[:4] == messages[:4]  # the dead, then the compaction turn whole
    assert orjson.dumps(sent[3]["content"][1]) == orjson.dumps(COMPACTION)
    assert sent[4]["content"][0] == result(2)  # the turn's answer, first in its message
    assert sent[4]["content"][1] == {"type": "text", "text": summary["content"]}
    assert sent[5:] == messages[5:]


def test_a_grown_body_that_answers_the_compaction_turn_is_converted_anew() -> None:
    earlier = GrownBodies("messages", smallest_bytes=0)
    messages = history(with_calls=True)
    first = {"model": "claude-x", "max_tokens": 10, "messages": messages[:4]}
    read_body(orjson.dumps(first), earlier)
    grown = {**first, "messages": messages}
    read = read_body(orjson.dumps(grown), earlier)
    assert read.messages == to_chat(None, messages)
    assert [m["role"] for m in read.messages] == ["system", "user", "assistant", "tool"]


def test_on_demand_compaction_requests_are_left_to_the_provider() -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": history(with_calls=False),
        "compaction": {"type": "summarize"},
    }
    assert MessagesDoor().parse(orjson.dumps(body)).passthrough == (
        "compaction: the provider compacts this history itself"
    )
    del body["compaction"]
    assert MessagesDoor().parse(orjson.dumps(body)).passthrough is None
