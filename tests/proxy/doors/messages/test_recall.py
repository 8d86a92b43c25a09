"""ctxgate's recall tool at the Messages door: offered in the request, its calls read from the
answer (streamed or not) and sent back with their results; the simulator checks pairing and
thinking signatures, the `anthropic` SDK's types the messages sent. Streams and the hiding of
the tool's calls: test_messages_recall_streams.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import httpx
import orjson
import pydantic
import pytest
from anthropic.types import MessageParam

from compression.messages.types import Message
from compression.summary.handles import RECALL_TOOL
from proxy.doors.messages.messages_door import MessagesDoor
from session.ports.frontdoor import ToolCall
from tests.proxy.doors.recall_fixtures import RECALL, RECALL_CALL, event_data, split_events
from tests.simulator import ModelSpec, Reply, Simulator

MODEL = "claude-sim"
DOOR = MessagesDoor()
VERSION = {"anthropic-version": "2023-06-01"}
BASH = {
    "name": "Bash",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
BASH_CALL = {"name": "Bash", "arguments": {"command": "ls"}}
THINKING = {"type": "enabled", "budget_tokens": 1024}
SDK_MESSAGES = pydantic.TypeAdapter(list[MessageParam])


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(default=ModelSpec(window=128_000)) as simulator:
        yield simulator


def body(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 2048,
        "system": "You are terse.",
        "messages": messages or [{"role": "user", "content": "What was m3?"}],
        "tools": [BASH],
        "thinking": THINKING,
        **extra,
    }


def post(sim: Simulator, raw: bytes) -> httpx.Response:
    return httpx.post(f"{sim.base_url}/messages", content=raw, headers=VERSION, timeout=10)


def unmarked(value: Any) -> Any:
    """Wire content without the cache breakpoints the door spends on a rewritten prefix."""
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    return value


def results(calls: tuple[ToolCall, ...], text: str = "the text of m3") -> list[Message]:
    return [
        cast(Message, {"role": "tool", "tool_call_id": call.id, "content": f"{text} ({n})"})
        for n, call in enumerate(calls)
    ]


# -- the request --------------------------------------------------------------------------------


def test_render_adds_the_tool_after_the_clients_and_never_returns_the_raw_bytes() -> None:
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    request = DOOR.parse(orjson.dumps(body(system=system)))
    assert DOOR.render(request, request.messages, None) == request.raw
    rendered = orjson.loads(DOOR.render(request, request.messages, None, [RECALL]))
    assert rendered["messages"] == body()["messages"] and rendered["system"] == system
    assert rendered["tools"] == [
        BASH,
        {
            "name": RECALL_TOOL,
            "description": RECALL["function"]["description"],
            "input_schema": RECALL["function"]["parameters"],
        },
    ]
    bare = DOOR.parse(orjson.dumps({k: v for k, v in body().items() if k != "tools"}))
    tools = orjson.loads(DOOR.render(bare, bare.messages, None, [RECALL]))["tools"]
    assert [tool["name"] for tool in tools] == [RECALL_TOOL]
    mine = {**BASH, "name": RECALL_TOOL}
    taken = DOOR.parse(orjson.dumps(body(tools=[mine])))
    assert orjson.loads(DOOR.render(taken, taken.messages, None, [RECALL]))["tools"] == [mine]


# -- recall rounds through the simulator --------------------------------------------------------


def round_trip(
    sim: Simulator, request_body: dict[str, Any], reply: Reply, after: list[Message] = ()
) -> tuple[dict[str, Any], httpx.Response]:
    """One answer calling the tool, its results sent back: (the answer, the next answer)."""
    request = DOOR.parse(orjson.dumps(request_body))
    sim.enqueue(reply)
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    view = [*request.messages, found.message, *results(found.calls), *after]
    return orjson.loads(answer), post(sim, DOOR.render(request, view, None, [RECALL]))


def test_a_recall_round_sends_thinking_text_and_only_the_tools_calls(sim: Simulator) -> None:
    answer, second = round_trip(
        sim, body(), Reply(content="Let me look.", tool_calls=[RECALL_CALL, BASH_CALL])
    )
    assert second.status_code == 200, second.text
    assert sim.received[-1].problems == []
    SDK_MESSAGES.validate_python(sim.received[-1].body["messages"])
    thinking, text, recall, _bash = answer["content"]
    assert thinking["type"] == "thinking" and recall["name"] == RECALL_TOOL
    assert unmarked(sim.received[-1].body["messages"][1:]) == [
        {"role": "assistant", "content": [thinking, text, recall]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": recall["id"],
                    "content": "the text of m3 (0)",
                }
            ],
        },
    ]


def test_two_rounds_in_a_row_stay_valid(sim: Simulator) -> None:
    request = DOOR.parse(orjson.dumps(body()))
    view = list(request.messages)
    for handle in ("m3", "m4"):
        sim.enqueue(
            Reply(
                content=f"Reading {handle}.",
                tool_calls=[{**RECALL_CALL, "arguments": {"handle": handle}}],
            )
        )
        reply = post(sim, DOOR.render(request, view, None, [RECALL]))
        assert reply.status_code == 200, reply.text
        found = DOOR.tool_calls(reply.content, RECALL_TOOL)
        assert found is not None
        view += [found.message, *results(found.calls, handle)]
    sim.enqueue(Reply(content="m3 and m4 said hello."))
    last = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert last.status_code == 200, last.text
    assert sim.received[-1].problems == []
    roles = [m["role"] for m in sim.received[-1].body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


def test_the_calls_come_back_as_chat_tool_calls(sim: Simulator) -> None:
    request = DOOR.parse(orjson.dumps(body()))
    sim.enqueue(Reply(tool_calls=[RECALL_CALL, BASH_CALL]))
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    recall_id = orjson.loads(answer)["content"][1]["id"]
    assert found.calls == (ToolCall(id=recall_id, name=RECALL_TOOL, arguments='{"handle":"m3"}'),)
    message = cast(dict[str, Any], found.message)
    assert message["role"] == "assistant" and message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": recall_id,
            "type": "function",
            "function": {"name": RECALL_TOOL, "arguments": '{"handle":"m3"}'},
        }
    ]


def test_results_of_two_calls_and_a_following_user_message_make_one_user_turn(
    sim: Simulator,
) -> None:
    later = cast(Message, {"role": "user", "content": "Then go on."})
    answer, second = round_trip(
        sim,
        body(),
        Reply(tool_calls=[RECALL_CALL, {**RECALL_CALL, "arguments": {"handle": "m4"}}]),
        [later],
    )
    assert second.status_code == 200, second.text
    sent = unmarked(sim.received[-1].body["messages"])
    SDK_MESSAGES.validate_python(sent)
    assert len(sent) == 3 and sent[2]["role"] == "user"
    kinds = [block["type"] for block in sent[2]["content"]]
    assert kinds == ["tool_result", "tool_result", "text"]
    assert [b.get("tool_use_id") for b in sent[2]["content"][:2]] == [
        block["id"] for block in answer["content"] if block["type"] == "tool_use"
    ]


def test_a_round_inside_the_clients_own_tool_loop(sim: Simulator) -> None:
    sim.enqueue(Reply(tool_calls=[BASH_CALL]))
    first = post(sim, orjson.dumps(body())).json()
    history = [
        {"role": "user", "content": "What was m3?"},
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": first["content"][1]["id"], "content": "a b"}
            ],
        },
    ]
    _answer, second = round_trip(sim, body(history), Reply(tool_calls=[RECALL_CALL]))
    assert second.status_code == 200, second.text
    assert [m["role"] for m in sim.received[-1].body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]


def test_the_simulator_refuses_an_unanswered_client_call(sim: Simulator) -> None:
    """What the rounds above guard: the client's call sent back without a result is refused."""
    request = DOOR.parse(orjson.dumps(body()))
    sim.enqueue(Reply(tool_calls=[RECALL_CALL, BASH_CALL]))
    answer = orjson.loads(post(sim, DOOR.render(request, request.messages, None, [RECALL])).content)
    recall_id = answer["content"][1]["id"]
    raw = body(
        [
            *body()["messages"],
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": recall_id}]},
        ]
    )
    assert post(sim, orjson.dumps(raw)).status_code == 400
    assert "without `tool_result` blocks" in sim.received[-1].problems[0]


def test_without_calls_drops_the_tools_blocks_and_makes_the_stop_ordinary(
    sim: Simulator,
) -> None:
    sim.enqueue(Reply(content="Here.", tool_calls=[RECALL_CALL]))
    answer = post(sim, orjson.dumps(body())).content
    original = orjson.loads(answer)
    trimmed = orjson.loads(DOOR.without_calls(answer, RECALL_TOOL))
    assert trimmed == {**original, "content": original["content"][:2], "stop_reason": "end_turn"}
    sim.enqueue(Reply(content="Here.", tool_calls=[RECALL_CALL, BASH_CALL]))
    both = post(sim, orjson.dumps(body())).content
    kept = orjson.loads(DOOR.without_calls(both, RECALL_TOOL))
    assert kept["stop_reason"] == "tool_use"
    assert [b["type"] for b in kept["content"]] == ["thinking", "text", "tool_use"]
    sim.enqueue(Reply(content="Plain."))
    plain = post(sim, orjson.dumps(body())).content
    assert DOOR.without_calls(plain, RECALL_TOOL) is plain
    assert DOOR.tool_calls(plain, RECALL_TOOL) is None


def test_a_streamed_recall_turn_goes_back_valid(sim: Simulator) -> None:
    """Thinking and its signature added up from deltas pass the simulator's signature check."""
    request = DOOR.parse(orjson.dumps(body(stream=True)))
    sim.enqueue(Reply(content="Let me look.", tool_calls=[RECALL_CALL]))
    raw = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    stream = DOOR.answer_stream(RECALL_TOOL)
    for event in split_events(raw):
        stream.feed(event_data(event))
    found = DOOR.tool_calls(stream.answer(), RECALL_TOOL)
    assert found is not None
    view = [*request.messages, found.message, *results(found.calls)]
    second = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert second.status_code == 200, second.text
    assert sim.received[-1].problems == []
