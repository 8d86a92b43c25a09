"""Gemini contents to chat-shaped messages and back (pure): what the compressor may change and
what must come back byte for byte."""

from __future__ import annotations

import copy
from typing import Any, cast

from compression.messages.content import with_prefix, with_text
from compression.messages.types import Message
from proxy.doors.gemini.pairs import DUMMY_SIGNATURE
from proxy.doors.gemini.parts import render_view, to_chat

SYSTEM = {"role": "user", "parts": [{"text": "You are Gemini CLI."}]}
THOUGHT = {"text": "I should look.", "thought": True, "thoughtSignature": "sig-thought"}
CALL_A = {"functionCall": {"name": "ls", "args": {"dir": "."}}, "thoughtSignature": "sig-a"}
CALL_B = {"functionCall": {"name": "cat", "args": {"path": "x"}}}
CONTENTS: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "<session_context>"}, {"text": "list files"}]},
    {"role": "model", "parts": [THOUGHT, {"text": "Looking."}, CALL_A, CALL_B]},
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "ls", "response": {"output": "a b"}}},
            {"text": "also this"},
            {"functionResponse": {"name": "cat", "response": {"output": "hello"}}},
        ],
    },
    {
        "role": "model",
        "parts": [
            {
                "functionCall": {"id": "c9", "name": "ls", "args": {"dir": "b"}},
                "thoughtSignature": "sig-9",
            }
        ],
    },
    {
        "role": "user",
        "parts": [{"functionResponse": {"id": "c9", "name": "ls", "response": {"x": 1}}}],
    },
]


def _chat() -> list[Message]:
    return to_chat(copy.deepcopy(SYSTEM), copy.deepcopy(CONTENTS))


def test_an_unchanged_view_renders_the_contents_it_came_from() -> None:
    view = _chat()
    rendered = render_view(view)
    assert rendered.system == SYSTEM
    assert rendered.contents == CONTENTS
    roles = [m["role"] for m in view]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "tool"]


def test_calls_and_responses_pair_by_position_and_by_id() -> None:
    view = _chat()
    calls = view[2].get("tool_calls") or []
    assert [c["id"] for c in calls] == ["gemini-pos-1-0", "gemini-pos-1-1"]
    assert [view[3].get("tool_call_id"), view[4].get("tool_call_id")] == [c["id"] for c in calls]
    assert view[7].get("tool_call_id") == "c9" and view[7].get("content") == '{"x":1}'
    assert view[3].get("content") == "a b"


def test_a_prefixed_model_turn_keeps_its_thought_and_signed_parts() -> None:
    view = _chat()
    view[2] = with_prefix(view[2], "SUMMARY")
    model = render_view(view).contents[1]
    assert model["parts"] == [THOUGHT, {"text": "SUMMARY"}, {"text": "Looking."}, CALL_A, CALL_B]


def test_a_changed_call_carries_the_dummy_never_its_old_signature() -> None:
    view = _chat()
    changed = cast(dict[str, Any], copy.deepcopy(view[6]))
    changed["tool_calls"][0]["function"]["arguments"] = '{"dir":"c"}'
    view[6] = cast(Message, changed)
    model = render_view(view).contents[3]
    assert model["parts"] == [
        {
            "functionCall": {"id": "c9", "name": "ls", "args": {"dir": "c"}},
            "thoughtSignature": DUMMY_SIGNATURE,
        }
    ]


def test_a_shortened_result_keeps_its_response_key_and_no_positional_id() -> None:
    view = _chat()
    view[3] = with_text(view[3], "a [archived: m3]")
    user = render_view(view).contents[2]
    assert user["parts"][0] == {
        "functionResponse": {"name": "ls", "response": {"output": "a [archived: m3]"}}
    }
    assert user["parts"][1:] == CONTENTS[2]["parts"][1:]


def test_orphans_are_removed_and_the_step_keeps_a_signature() -> None:
    view = _chat()
    del view[3]  # the answer to the signed first call is gone
    rendered = render_view(view).contents
    model, user = rendered[1], rendered[2]
    assert model["parts"][:2] == [THOUGHT, {"text": "Looking."}]
    assert model["parts"][2] == {**CALL_B, "thoughtSignature": DUMMY_SIGNATURE}
    assert len(model["parts"]) == 3
    assert [p for p in user["parts"] if "functionResponse" in p] == [CONTENTS[2]["parts"][2]]
    summary = cast(Message, {"role": "user", "content": "summary"})
    fresh = _chat()
    tail = render_view([fresh[0], summary, *fresh[3:]]).contents
    assert tail[0] == {"role": "user", "parts": [{"text": "summary"}]}
    assert tail[1] == CONTENTS[2] | {"parts": [{"text": "also this"}]}
    assert tail[2:] == CONTENTS[3:]
