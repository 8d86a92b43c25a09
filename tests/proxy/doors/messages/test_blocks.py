"""Anthropic Messages blocks to chat-shaped messages and back: lossless, pairs always valid."""

from __future__ import annotations

import copy
from typing import Any, cast

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.counting.tokens import RoughCounter
from compression.messages.content import with_text
from compression.messages.types import Message
from proxy.doors.messages.blocks import REMOVED_CALL_TEXT, render_view, to_chat, to_wire
from proxy.doors.messages.request import tools_as_chat
from session.ports.frontdoor import ORIGINAL, original_of

SYSTEM = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
]
THINK = {"type": "thinking", "thinking": "Let me list the files.", "signature": "c2lnLTE="}
REDACTED = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "List the files, then read setup.py."},
    {
        "role": "assistant",
        "content": [
            THINK,
            {"type": "text", "text": "I'll list them."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "setup.py\nREADME"},
            {
                "type": "text",
                "text": "Also check the README.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
    },
    {
        "role": "assistant",
        "content": [
            REDACTED,
            {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "setup.py"}},
            {"type": "tool_use", "id": "toolu_3", "name": "Read", "input": {"path": "README"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "x" * 300}],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_3",
                "content": "# README",
                "is_error": False,
            },
        ],
    },
]


def test_shapes_follow_the_chat_convention() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    roles = [m.get("role") for m in chat]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant", "tool", "tool"]
    assistant = chat[2]
    assert assistant.get("content") == [{"type": "text", "text": "I'll list them."}]
    calls = assistant.get("tool_calls") or []
    assert calls[0]["function"] == {"name": "Bash", "arguments": '{"command":"ls"}'}
    assert chat[3] == {**chat[3], "role": "tool", "tool_call_id": "toolu_1"}
    assert chat[3].get("content") == "setup.py\nREADME"
    assert chat[5].get("content") is None  # thinking only: nothing for the compressor to read
    assert all(original_of(m) is not None for m in chat)


def test_unchanged_view_renders_the_same_body() -> None:
    system, messages = to_wire(to_chat(SYSTEM, MESSAGES))
    assert system == SYSTEM
    assert orjson.dumps(messages) == orjson.dumps(MESSAGES)


def test_string_system_and_string_content_stay_strings() -> None:
    wire = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    system, messages = to_wire(to_chat("Be terse.", wire))
    assert system == "Be terse."
    assert messages == wire


def test_shortened_tool_result_is_rebuilt_with_its_template() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    chat[7] = with_text(chat[7], "[shortened]")
    _, messages = to_wire(chat)
    last = messages[-1]["content"]
    assert isinstance(last, list)
    assert last[1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_3",
        "content": "[shortened]",
        "is_error": False,
    }
    assert messages[:-1] == MESSAGES[:-1]
    assert ORIGINAL not in orjson.dumps(messages).decode()


def test_changed_assistant_keeps_its_thinking_first_and_byte_for_byte() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    changed = cast(dict[str, Any], with_text(chat[2], "I listed them."))
    call = copy.deepcopy(changed["tool_calls"][0])
    call["function"]["arguments"] = '{"command":"ls -la"}'
    changed["tool_calls"] = [call]
    chat[2] = cast(Message, changed)
    _, messages = to_wire(chat)
    blocks = messages[1]["content"]
    assert isinstance(blocks, list)
    assert blocks[0] is THINK or blocks[0] == THINK
    assert blocks[1] == {"type": "text", "text": "I listed them."}
    assert blocks[2] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Bash",
        "input": {"command": "ls -la"},
    }


def test_summary_is_merged_after_tool_results_and_dropped_calls_lose_their_results() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    # head, summary, then the tail from the second assistant turn on
    view = [chat[0], cast(Message, {"role": "user", "content": "SUMMARY"}), *chat[5:]]
    system, messages = to_wire(view)
    assert system == SYSTEM
    assert messages[0] == {"role": "user", "content": "SUMMARY"}
    assert messages[1:] == MESSAGES[3:]
    # a view where the compressor kept results without their call (never expected)
    broken = [chat[0], cast(Message, {"role": "user", "content": "SUMMARY"}), *chat[6:]]
    _, repaired = to_wire(broken)
    assert repaired == [{"role": "user", "content": [{"type": "text", "text": "SUMMARY"}]}]


def test_system_entries_among_turns_travel_with_the_message_before() -> None:
    reminder = {"role": "system", "content": "<system-reminder>todo list</system-reminder>"}
    wire = [*MESSAGES[:2], reminder, *MESSAGES[2:]]
    chat = to_chat(None, wire)
    assert [m.get("role") for m in chat][:3] == ["user", "assistant", "tool"]
    assert to_wire(chat) == (None, wire)
    view = [chat[0], with_text(chat[1], "shorter"), *chat[2:]]
    _, messages = to_wire(view)
    assert messages[2] == reminder
    assert messages[3] == MESSAGES[2]


def test_the_last_written_message_is_known() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    assert render_view(chat).last_written is None
    view = [chat[0], cast(Message, {"role": "user", "content": "SUMMARY"}), *chat[5:]]
    assert render_view(view).last_written == 0
    pruned = [*chat[:3], with_text(chat[3], "[pruned]"), *chat[4:]]
    assert render_view(pruned).last_written == 2


def test_unanswered_calls_are_removed_except_in_the_last_message() -> None:
    chat = to_chat(SYSTEM, MESSAGES)
    view = [*chat[:3], cast(Message, {"role": "user", "content": "go on"})]
    _, messages = to_wire(view)
    assistant = messages[1]["content"]
    assert isinstance(assistant, list)
    assert [b["type"] for b in assistant] == ["thinking", "text"]
    _, ending = to_wire(chat[:3])
    assert ending[-1] == MESSAGES[1]
    only_call = [*chat[4:6], cast(Message, {"role": "user", "content": "go on"})]
    _, messages = to_wire(only_call)
    assert messages[1]["content"] == [REDACTED, {"type": "text", "text": REMOVED_CALL_TEXT}]


def test_documents_and_images_count_with_the_flat_figure() -> None:
    data = "A" * 40_000
    wire = [
        {
            "role": "user",
            "content": [
                {"type": "document", "source": {"type": "base64", "data": data}},
                {"type": "image", "source": {"type": "base64", "data": data}},
                {"type": "text", "text": "What do these show?"},
            ],
        }
    ]
    counter = RoughCounter(image_tokens=1000)
    chat = to_chat(None, wire)
    assert counter.count_messages(chat) < 2100
    _, messages = to_wire(chat)
    assert messages == wire


def test_tools_in_chat_shape() -> None:
    tools = [{"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}]
    assert tools_as_chat(tools) == [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "Run", "parameters": {"type": "object"}},
        }
    ]


# -- properties ---------------------------------------------------------------------------------

_text = st.text(alphabet="abc xyz\n", min_size=1, max_size=12)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid Messages history: user text, then turns of tool loops and plain replies."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(_text)}]
    counter = 0
    for _ in range(draw(st.integers(1, 6))):
        calls = draw(st.integers(0, 2))
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": draw(_text), "signature": "sig"})
        if draw(st.booleans()) or not calls:
            blocks.append({"type": "text", "text": draw(_text)})
        ids = []
        for _ in range(calls):
            counter += 1
            ids.append(f"toolu_{counter}")
            blocks.append({"type": "tool_use", "id": ids[-1], "name": "Bash", "input": {"c": 1}})
        messages.append({"role": "assistant", "content": blocks})
        if draw(st.integers(0, 4)) == 0:
            messages.append({"role": "system", "content": "reminder"})
        answer: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": i, "content": draw(_text)} for i in ids
        ]
        if draw(st.booleans()) or not ids:
            answer.append({"type": "text", "text": draw(_text)})
        use_string = not ids and draw(st.booleans())
        messages.append({"role": "user", "content": answer[0]["text"] if use_string else answer})
    return messages


def _cuttable(chat: list[Message], at: int) -> bool:
    """The compressor never cuts between a call and its results."""
    return at >= len(chat) or chat[at].get("role") != "tool"


@given(conversations(), st.data())
@settings(max_examples=200, deadline=None)
def test_any_compressed_view_keeps_pairs_valid(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    chat = to_chat("sys", messages)
    system, rendered = to_wire(chat)
    assert system == "sys"
    assert orjson.dumps(rendered) == orjson.dumps(messages)

    cuts = [i for i in range(2, len(chat) + 1) if _cuttable(chat, i)]
    start = data.draw(st.sampled_from(cuts))
    tail = list(chat[start:])
    for i, message in enumerate(tail):
        if message.get("role") in ("tool", "user") and data.draw(st.booleans()):
            tail[i] = with_text(message, "[pruned]")
    summary_role = "assistant" if tail and tail[0].get("role") == "user" else "user"
    view = [chat[0], cast(Message, {"role": summary_role, "content": "SUMMARY"}), *tail]
    if summary_role == "assistant":
        view.insert(1, cast(Message, {"role": "user", "content": "Continue."}))
    _, out = to_wire(orjson.loads(orjson.dumps(view)))  # as a checkpoint stores it
    _assert_valid(out, messages)


def _assert_valid(out: list[Any], source: list[dict[str, Any]]) -> None:
    thinking = {
        orjson.dumps(b)
        for m in source
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "thinking"
    }
    out = [m for m in out if m["role"] != "system"]
    assert out[0]["role"] == "user"
    for index, message in enumerate(out):
        if index:
            assert message["role"] != out[index - 1]["role"]
        blocks = message["content"]
        if isinstance(blocks, str):
            continue
        assert blocks
        kinds = [b["type"] for b in blocks]
        if "tool_result" in kinds:
            first_other = next((k for k, t in enumerate(kinds) if t != "tool_result"), len(kinds))
            assert "tool_result" not in kinds[first_other:]
            asked = {b["id"] for b in out[index - 1]["content"] if b["type"] == "tool_use"}
            assert {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"} <= asked
        calls = {b["id"] for b in blocks if b["type"] == "tool_use"}
        if calls and index + 1 < len(out):
            following = out[index + 1]["content"]
            assert isinstance(following, list)
            assert calls <= {b.get("tool_use_id") for b in following}
        for block in blocks:
            if block["type"] == "thinking":
                assert orjson.dumps(block) in thinking
