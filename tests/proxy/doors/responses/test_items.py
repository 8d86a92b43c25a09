"""Responses items to the compressor's messages and back: lossless, and every view the real
compressor produces renders to a valid input (calls paired, opaque items verbatim)."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.engine import SummaryReply
from compression.options import CompressorOptions
from proxy.doors.responses.items import INSTRUCTIONS_MARK, item_kind, output_key, to_messages
from proxy.doors.responses.render import to_items
from session.ports.frontdoor import ORIGINAL
from tests.compression.builders import context
from tests.compression.counters import CharCounter
from tests.compression.summarizers import SUMMARY_BODY, ScriptedSummarizer

Item = dict[str, Any]
WORDS = st.text(alphabet="abcdefghij klmnop\n", min_size=1, max_size=60)
OPAQUE_TYPES = ("compaction", "web_search_call", "item_reference", "future_thing")
ENGINE = Compressor(CompressorOptions())


def sealed(n: int) -> str:
    return f"gAAAA{n:04d}" + "Zx/+" * 20


def opaque(kind: str, n: int) -> Item:
    if kind == "compaction":
        return {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": sealed(n)}
    if kind == "web_search_call":
        return {
            "type": "web_search_call",
            "id": f"ws_{n}",
            "status": "completed",
            "action": {"type": "search", "query": "weather"},
        }
    if kind == "item_reference":
        return {"type": "item_reference", "id": f"msg_ref_{n}"}
    return {"type": "future_thing", "id": f"ft_{n}", "payload": {"k": [1, 2.5, None]}}


@st.composite
def user_item(draw: st.DrawFn, n: int) -> Item:
    text = f"u{n}: " + draw(WORDS)
    shape = draw(st.integers(0, 4))
    if shape == 0:
        return {"role": "user", "content": text}
    parts: list[Item] = [{"type": "input_text", "text": text}]
    if shape == 1:
        parts.append({"type": "input_image", "image_url": "data:image/png;base64,QUJD"})
    if shape == 2:
        parts.append({"type": "input_file", "filename": "a.pdf", "file_data": "JVBER" * 400})
    return {"type": "message", "role": "user", "content": parts}


@st.composite
def call_pair(draw: st.DrawFn, call_id: str) -> tuple[Item, Item]:
    kind = draw(st.sampled_from(["function_call", "function_call", "custom_tool_call", "shell"]))
    size = draw(st.sampled_from([0, 10, 300, 1_500, 4_000]))
    output: Any = ("out " * size)[:size] + " done"
    if kind == "function_call":
        arguments = json.dumps({"command": ["bash", "-lc", "x" * draw(st.sampled_from([5, 900]))]})
        call = {
            "type": "function_call",
            "call_id": call_id,
            "name": "shell",
            "arguments": arguments,
        }
        if draw(st.booleans()):
            output = [{"type": "input_text", "text": output}]
        return call, {"type": "function_call_output", "call_id": call_id, "output": output}
    if kind == "custom_tool_call":
        patch = "*** Begin Patch\n" + "+line\n" * draw(st.sampled_from([2, 200]))
        call = {
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": "apply_patch",
            "input": patch,
        }
        return call, {"type": "custom_tool_call_output", "call_id": call_id, "output": output}
    call = {
        "type": "local_shell_call",
        "id": f"lsh_{call_id}",
        "call_id": call_id,
        "status": "completed",
        "action": {"type": "exec", "command": ["ls", "-la"], "env": {}},
    }
    return call, {"type": "local_shell_call_output", "call_id": call_id, "output": output}


@st.composite
def model_turn(draw: st.DrawFn, n: int) -> list[Item]:
    """One model response (reasoning, text, calls) and the outputs of its calls."""
    items: list[Item] = []
    if draw(st.integers(0, 3)) > 0:
        summary = [{"type": "summary_text", "text": draw(WORDS)}] if draw(st.booleans()) else []
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": summary,
                "encrypted_content": sealed(n),
            }
        )
    if draw(st.integers(0, 6)) == 0:
        items.append(opaque("web_search_call", n))
    calls = draw(st.integers(0, 3))
    if draw(st.booleans()) or calls == 0:
        text = draw(WORDS)
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{n}",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    pairs = [draw(call_pair(f"call_{n}_{k}")) for k in range(calls)]
    items += [call for call, _ in pairs]
    outputs: list[Item] = [output for _, output in pairs]
    for output in draw(st.permutations(outputs)):
        items.append(output)
        if draw(st.integers(0, 8)) == 0:
            items.append(opaque(draw(st.sampled_from(OPAQUE_TYPES)), n))
    return items


@st.composite
def history(draw: st.DrawFn) -> tuple[list[Item], str | None]:
    items: list[Item] = []
    if draw(st.integers(0, 5)) == 0:
        items.append(opaque(draw(st.sampled_from(OPAQUE_TYPES)), 999))
    for d in range(draw(st.integers(0, 2))):
        role = draw(st.sampled_from(["developer", "system"]))
        text = f"rules {d} " * 30
        items.append(
            {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}
        )
    n = 0
    for turn in range(draw(st.integers(1, 6))):
        items.append(draw(user_item(turn)))
        if draw(st.integers(0, 6)) == 0:
            items.append(opaque("compaction", 500 + turn))
        for _ in range(draw(st.integers(0, 5))):
            n += 1
            items += draw(model_turn(n))
    if draw(st.integers(0, 4)) == 0:  # the newest calls are still running
        n += 1
        items += [item for item in draw(model_turn(n)) if item_kind(item) != "output"]
    instructions = draw(st.sampled_from([None, "You are Codex. " * 40]))
    return items, instructions


@settings(max_examples=300, deadline=None)
@given(case=history())
def test_an_unchanged_view_renders_the_items_exactly(case: tuple[list[Item], str | None]) -> None:
    items, instructions = case
    before = copy.deepcopy(items)
    messages = to_messages(items, instructions)
    assert items == before
    assert to_items(messages, messages) == items
    # A view read back from a checkpoint holds copies, not the parsed objects.
    assert to_items(orjson.loads(orjson.dumps(messages))) == items
    assert orjson.dumps(to_items(orjson.loads(orjson.dumps(messages)))) == orjson.dumps(items)
    if instructions:
        assert messages[0] == {
            "role": "system",
            "content": instructions,
            ORIGINAL: INSTRUCTIONS_MARK,
        }


def pairs_of(items: list[Item]) -> tuple[list[str], list[str]]:
    """(call ids, output keys) in order."""
    calls = [item["call_id"] for item in items if item_kind(item) == "call"]
    outputs = [key for item in items if item_kind(item) == "output" if (key := output_key(item))]
    return calls, outputs


def last_turn_reasoning(items: list[Item]) -> list[Item]:
    """Reasoning of the newest model response, when it follows the newest user message."""
    groups: list[list[Item]] = []
    for item in items:
        kind = item_kind(item)
        if kind == "message" and item.get("role") != "assistant":
            groups = []
        elif kind in ("reasoning", "call", "message", "turn"):
            if not groups or groups[-1][-1] is None:
                groups.append([])
            groups[-1].append(item)
        elif kind == "output" and groups:
            groups[-1].append(None)  # type: ignore[arg-type]
    if not groups:
        return []
    return [item for item in groups[-1] if item is not None and item_kind(item) == "reasoning"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=history(),
    context_length=st.sampled_from([1_500, 4_000, 16_000]),
    summarized=st.booleans(),
)
async def test_every_compressed_view_renders_to_a_valid_input(
    case: tuple[list[Item], str | None], context_length: int, summarized: bool
) -> None:
    items, instructions = case
    messages = to_messages(items, instructions)
    summarize = ScriptedSummarizer(SummaryReply(SUMMARY_BODY, "stop")) if summarized else None
    ctx = context(
        summarize=summarize, context_length=context_length, counter=CharCounter(), force=True
    )
    result = await ENGINE.compress(messages, ctx)
    event(result.outcome)
    check_invariants(result.messages)
    out = to_items(result.messages, messages)
    assert ORIGINAL.encode() not in orjson.dumps(out)
    calls_in, outputs_in = pairs_of(items)
    calls_out, outputs_out = pairs_of(out)
    # Every output answers a call before it; a call without output was already unanswered.
    for index, item in enumerate(out):
        if item_kind(item) == "output":
            assert item["call_id"] in pairs_of(out[:index])[0]
    assert set(calls_out) - set(outputs_out) <= set(calls_in) - set(outputs_in)
    # Reasoning and opaque items are never altered, only kept or dropped.
    for item in out:
        if item_kind(item) in ("reasoning", "opaque", "turn"):
            assert item in items
    for item in last_turn_reasoning(items):
        assert item in out
    if result.outcome in ("compressed", "fallback"):
        event(f"kept {len(out)} of {len(items)} items")
        assert len(orjson.dumps(out)) < len(orjson.dumps(items))
    else:
        assert out == items


def test_a_changed_message_is_rebuilt_on_its_items() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed(1)}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "shell",
        "arguments": '{"cmd": "' + "y" * 900 + '"}',
    }
    output = {"type": "function_call_output", "call_id": "c1", "output": "z" * 5000}
    reference = {"type": "item_reference", "id": "msg_9"}
    messages = to_messages([reasoning, call, output, reference], None)
    turn = {**messages[0], "content": "Summary first."}
    turn["tool_calls"] = [
        {**messages[0]["tool_calls"][0], "function": {"name": "shell", "arguments": "{}"}}
    ]
    result = {**messages[1], "content": "[shell] 5000 chars"}
    assert to_items([turn, result]) == [
        reasoning,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Summary first."}],
        },
        {**call, "arguments": "{}"},
        {**output, "output": "[shell] 5000 chars"},
        reference,
    ]
    dropped = {k: v for k, v in messages[0].items() if k != "tool_calls"}
    dropped["content"] = "(tool call removed)"
    assert to_items([dropped]) == [
        reasoning,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "(tool call removed)"}],
        },
    ]


def test_files_count_as_a_fixed_figure_and_come_back_verbatim() -> None:
    part = {"type": "input_file", "filename": "big.pdf", "file_data": "JVBER" * 100_000}
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "read"}, part],
    }
    [message] = to_messages([item], None)
    assert CharCounter().count_message(message) < 200
    changed = {**message, "content": [{"type": "text", "text": "Summary."}, *message["content"]]}
    [rebuilt] = to_items([changed])
    assert rebuilt["content"] == [
        {"type": "input_text", "text": "Summary."},
        {"type": "input_text", "text": "read"},
        part,
    ]


def test_a_summary_becomes_a_new_message_item() -> None:
    assert to_items([{"role": "user", "content": "Earlier: fixed the bug."}]) == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Earlier: fixed the bug."}],
        }
    ]
    assert to_items([{"role": "assistant", "content": "Noted."}]) == [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Noted."}],
        }
    ]
