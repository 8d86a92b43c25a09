"""The next action of an answer in each wire API, and when two agree (pure)."""

from __future__ import annotations

import orjson

from session.ledger.actions import Action, agree, next_action
from session.ledger.shadow import shadow_body


def chat(
    content: str | None = None, call: tuple[str, str] | None = None, cut: bool = False
) -> bytes:
    message: dict[str, object] = {"role": "assistant", "content": content}
    if call is not None:
        message["tool_calls"] = [
            {"id": "c1", "type": "function", "function": {"name": call[0], "arguments": call[1]}}
        ]
    finish = "length" if cut else ("tool_calls" if call else "stop")
    return orjson.dumps({"choices": [{"message": message, "finish_reason": finish}]})


def test_tool_calls_agree_on_name_and_normalised_arguments() -> None:
    a = next_action("chat", chat(call=("bash", '{"cmd": "ls  ", "flags": ["-l"]}')))
    b = next_action("chat", chat(call=("bash", '{"flags":["-l"],"cmd":"ls"}')))
    c = next_action("chat", chat(call=("bash", '{"cmd": "pwd"}')))
    d = next_action("chat", chat(call=("read", '{"cmd": "ls"}')))
    assert a is not None and b is not None and c is not None and d is not None
    assert a == Action("tool", "bash", '{"cmd":"ls","flags":["-l"]}')
    assert agree(a, b) and not agree(a, c) and not agree(a, d)


def test_a_call_cut_by_the_bound_is_judged_by_its_name() -> None:
    whole = next_action("chat", chat(call=("write", '{"path": "a.py", "text": "long"}')))
    cut = next_action("chat", chat(call=("write", '{"path": "a.py", "te'), cut=True))
    other = next_action("chat", chat(call=("read", '{"pa'), cut=True))
    assert whole is not None and cut is not None and other is not None
    assert agree(whole, cut) and not agree(whole, other)


def test_texts_agree_on_a_normalised_prefix() -> None:
    long = next_action("chat", chat("The tests  PASS.\nNext I will update the docs."))
    short = next_action("chat", chat("the tests pass. next"))
    other = next_action("chat", chat("The tests fail."))
    empty = next_action("chat", chat(""))
    assert long is not None and short is not None and other is not None and empty is not None
    assert agree(long, short) and not agree(long, other)
    assert not agree(long, empty) and agree(empty, empty)
    call = next_action("chat", chat(call=("bash", "{}")))
    assert call is not None and not agree(long, call)


def test_responses_and_messages_shapes() -> None:
    responses = {
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}'},
        ],
    }
    messages = {
        "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": ["ls"]}},
        ],
    }
    a = next_action("responses", orjson.dumps(responses))
    b = next_action("messages", orjson.dumps(messages))
    assert a == b == Action("tool", "shell", '{"command":["ls"]}')
    text = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}]}
    assert next_action("responses", orjson.dumps(text)) == Action("text", "", "hi")
    assert next_action("chat", b"not json") is None
    assert next_action("chat", b'{"error": {"message": "x"}}') is None


def test_shadow_bodies_are_unstreamed_and_bounded() -> None:
    raw = orjson.dumps(
        {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 9}
    )
    assert orjson.loads(shadow_body("chat", raw, 64)) == {"model": "m", "max_tokens": 64}
    raw = orjson.dumps({"model": "m", "messages": []})
    assert orjson.loads(shadow_body("chat", raw, 64))["max_completion_tokens"] == 64
    raw = orjson.dumps({"model": "m", "stream": True, "store": True, "input": "x"})
    assert orjson.loads(shadow_body("responses", raw, 64)) == {
        "model": "m",
        "input": "x",
        "max_output_tokens": 64,
    }
    raw = orjson.dumps({"model": "m", "max_tokens": 32000, "thinking": {"budget_tokens": 1024}})
    # A thinking budget must stay below max_tokens: the bound comes on top of it.
    assert orjson.loads(shadow_body("messages", raw, 64))["max_tokens"] == 1088
