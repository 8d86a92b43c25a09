"""ctxgate's recall tool at the Responses door: offered in the request, its calls read from the
answer and sent back with their outputs (the simulator validates pairing and the reasoning
seal), hidden from a relayed stream (the `openai` SDK reads what the client would get)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import httpx
import openai
import orjson
import pydantic
import pytest
from openai.types.responses import ResponseInputParam

from compression.messages.types import Message
from compression.summary.handles import RECALL_TOOL
from proxy.doors.responses.items import group_message
from proxy.doors.responses.responses_door import ResponsesDoor
from session.ports.frontdoor import ORIGINAL, ToolCall
from tests.proxy.doors.recall_fixtures import (
    RECALL,
    RECALL_CALL,
    event_data,
    serve_events,
    split_events,
)
from tests.simulator import ModelSpec, Reply, Simulator
from tests.simulator.responses_items import Seal
from tests.simulator.responses_output import OutputIds, output_items, response_object
from tests.simulator.responses_sse import encode, response_events

MODEL = "gpt-sim"
DOOR = ResponsesDoor()
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}
INPUT: list[dict[str, Any]] = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Hi."}]},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "What was m3?"}],
    },
]
SHELL_CALL = {"name": "shell", "arguments": {"command": "ls"}}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(default=ModelSpec(window=128_000)) as simulator:
        yield simulator


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "input": INPUT,
        "tools": [SHELL],
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"summary": "auto"},
        **extra,
    }


def post(sim: Simulator, raw: bytes) -> httpx.Response:
    return httpx.post(f"{sim.base_url}/responses", content=raw, timeout=10)


SDK_INPUT = pydantic.TypeAdapter(ResponseInputParam)


def recalled(view: list[Message], call: ToolCall, text: str) -> list[Message]:
    return [*view, cast(Message, {"role": "tool", "tool_call_id": call.id, "content": text})]


# -- the request --------------------------------------------------------------------------------


def test_render_adds_the_tool_after_the_clients_and_never_returns_the_raw_bytes() -> None:
    request = DOOR.parse(orjson.dumps(body()))
    assert DOOR.render(request, request.messages, None) == request.raw
    rendered = orjson.loads(DOOR.render(request, request.messages, None, [RECALL]))
    assert rendered["input"] == INPUT
    assert rendered["tools"] == [
        SHELL,
        {
            "type": "function",
            "name": RECALL_TOOL,
            "description": RECALL["function"]["description"],
            "parameters": RECALL["function"]["parameters"],
        },
    ]
    bare = DOOR.parse(orjson.dumps({"model": MODEL, "input": "hello"}))
    assert [
        t["name"] for t in orjson.loads(DOOR.render(bare, bare.messages, None, [RECALL]))["tools"]
    ] == [RECALL_TOOL]
    mine = {**SHELL, "name": RECALL_TOOL}
    taken = DOOR.parse(orjson.dumps(body(tools=[mine])))
    assert orjson.loads(DOOR.render(taken, taken.messages, None, [RECALL]))["tools"] == [mine]


# -- one recall round through the simulator -----------------------------------------------------


def test_a_recall_round_goes_back_as_valid_items_without_the_clients_calls(
    sim: Simulator,
) -> None:
    request = DOOR.parse(orjson.dumps(body()))
    sim.enqueue(Reply(reasoning_content="I need m3.", tool_calls=[RECALL_CALL, SHELL_CALL]))
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    output = orjson.loads(answer)["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call", "function_call"]

    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    assert found.calls == (
        ToolCall(id=output[1]["call_id"], name=RECALL_TOOL, arguments='{"handle": "m3"}'),
    )
    message = cast(dict[str, Any], found.message)
    assert message["role"] == "assistant" and message["content"] is None
    assert [c["function"]["name"] for c in message["tool_calls"]] == [RECALL_TOOL]

    view = recalled([*request.messages, found.message], found.calls[0], "the text of m3")
    second = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert second.status_code == 200, second.text
    assert sim.received[-1].problems == []
    sent = sim.received[-1].body["input"]
    SDK_INPUT.validate_python(sent)  # every item has the fields the SDK's types require
    without_id = {k: v for k, v in output[1].items() if k != "id"}  # store: false
    assert sent == [
        *INPUT,
        output[0],  # the reasoning item byte for byte: its seal still verifies
        without_id,
        {
            "type": "function_call_output",
            "call_id": output[1]["call_id"],
            "output": "the text of m3",
        },
    ]


def test_two_rounds_in_a_row_stay_valid(sim: Simulator) -> None:
    request = DOOR.parse(orjson.dumps(body()))
    view = list(request.messages)
    for handle in ("m3", "m4"):
        call = {**RECALL_CALL, "arguments": {"handle": handle}}
        sim.enqueue(Reply(reasoning_content=f"Need {handle}.", tool_calls=[call]))
        reply = post(sim, DOOR.render(request, view, None, [RECALL]))
        assert reply.status_code == 200, reply.text
        found = DOOR.tool_calls(reply.content, RECALL_TOOL)
        assert found is not None
        view = recalled([*view, found.message], found.calls[0], f"text of {handle}")
    sim.enqueue(Reply(content="Both said hello."))
    last = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert last.status_code == 200, last.text
    assert sim.received[-1].problems == []
    kinds = [item.get("type") for item in sim.received[-1].body["input"]]
    assert kinds == [
        "message",
        "message",
        *["reasoning", "function_call", "function_call_output"] * 2,
    ]


def test_the_clients_call_would_break_the_round(sim: Simulator) -> None:
    """What the round above guards: the client's own call sent back unanswered is refused."""
    request = DOOR.parse(orjson.dumps(body()))
    sim.enqueue(Reply(tool_calls=[RECALL_CALL, SHELL_CALL]))
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    everything = orjson.loads(answer)["output"]
    with_theirs = cast(Message, {**group_message(everything), ORIGINAL: everything})
    view = recalled([*request.messages, with_theirs], found.calls[0], "m3")
    assert post(sim, DOOR.render(request, view, None, [RECALL])).status_code == 400
    assert "No tool output found for function call" in sim.received[-1].problems[0]


def test_without_stored_items_a_bare_reasoning_item_is_left_out(sim: Simulator) -> None:
    request = DOOR.parse(orjson.dumps(body(include=[])))
    sim.enqueue(
        Reply(reasoning_content="Look it up.", content="Checking.", tool_calls=[RECALL_CALL])
    )
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    output = orjson.loads(answer)["output"]
    assert output[0]["type"] == "reasoning" and output[0]["encrypted_content"] is None
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    items = cast(dict[str, Any], found.message)[ORIGINAL]
    assert [item["type"] for item in items] == ["message", "function_call"]
    assert all("id" not in item for item in items)
    # Text as the door reads a client's assistant item: chat parts, the wire part kept with them.
    content = cast(dict[str, Any], found.message)["content"]
    assert [(part["type"], part["text"]) for part in content] == [("text", "Checking.")]


def items_of(reply: Reply) -> list[dict[str, Any]]:
    counter = iter(range(100))
    return output_items(reply, OutputIds(), lambda: f"call_{next(counter)}", Seal(b"k"), True)


def test_reasoning_that_led_only_to_a_client_call_is_left_out() -> None:
    first = items_of(Reply(reasoning_content="Run ls.", tool_calls=[SHELL_CALL]))
    second = items_of(Reply(reasoning_content="Now m3.", tool_calls=[RECALL_CALL]))
    answer = orjson.dumps({"id": "resp_1", "store": True, "output": [*first, *second]})
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    assert cast(dict[str, Any], found.message)[ORIGINAL] == second
    text = items_of(Reply(reasoning_content="Both.", content="Both.", tool_calls=[SHELL_CALL]))
    mixed = orjson.dumps({"id": "resp_2", "store": True, "output": [*text, second[1]]})
    found = DOOR.tool_calls(mixed, RECALL_TOOL)
    assert found is not None
    assert cast(dict[str, Any], found.message)[ORIGINAL] == [text[0], text[1], second[1]]


def test_a_request_on_a_stored_history_keeps_it_and_the_item_ids(sim: Simulator) -> None:
    first = post(sim, orjson.dumps({"model": MODEL, "input": INPUT, "tools": [SHELL]}))
    previous = first.json()["id"]
    later = {"model": MODEL, "previous_response_id": previous, "input": "And m3?", "tools": [SHELL]}
    request = DOOR.parse(orjson.dumps(later))
    assert request.passthrough is not None
    sim.enqueue(Reply(content="Let me look.", tool_calls=[RECALL_CALL]))
    answer = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    found = DOOR.tool_calls(answer, RECALL_TOOL)
    assert found is not None
    view = recalled([*request.messages, found.message], found.calls[0], "m3 said hello")
    second = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert second.status_code == 200, second.text
    sent = sim.received[-1].body
    SDK_INPUT.validate_python(sent["input"])
    assert sent["previous_response_id"] == previous
    assert sent["input"][1:3] == orjson.loads(answer)["output"]  # ids kept: the provider has them


def test_without_calls_drops_only_the_tools_items(sim: Simulator) -> None:
    sim.enqueue(Reply(content="Here.", tool_calls=[RECALL_CALL, SHELL_CALL]))
    answer = post(sim, orjson.dumps(body(tools=[SHELL]))).content
    trimmed = orjson.loads(DOOR.without_calls(answer, RECALL_TOOL))
    original = orjson.loads(answer)
    assert trimmed == {**original, "output": [original["output"][0], original["output"][2]]}
    sim.enqueue(Reply(content="Plain."))
    plain = post(sim, orjson.dumps(body())).content
    assert DOOR.without_calls(plain, RECALL_TOOL) is plain
    assert DOOR.tool_calls(plain, RECALL_TOOL) is None


# -- streams ------------------------------------------------------------------------------------


def streamed(sim: Simulator, reply: Reply) -> list[bytes]:
    sim.enqueue(reply)
    raw = orjson.dumps(body(stream=True, store=True))
    return split_events(post(sim, raw).content)


def fed(events: list[bytes]) -> tuple[Any, list[str | None]]:
    stream = DOOR.answer_stream(RECALL_TOOL)
    decisions = []
    for event in events:
        stream.feed(event_data(event))
        decisions.append(stream.decided)
    return stream, decisions


@pytest.mark.parametrize(
    ("reply", "decided"),
    [
        (Reply(reasoning_content="Need m3.", tool_calls=[RECALL_CALL, SHELL_CALL]), "recall"),
        (Reply(content="From memory: hello.", tool_calls=[RECALL_CALL]), "answer"),
        (Reply(reasoning_content="Easy.", content="Hello."), "answer"),
    ],
)
def test_a_stream_adds_up_to_the_stored_response(
    sim: Simulator, reply: Reply, decided: str
) -> None:
    events = streamed(sim, reply)
    stream, decisions = fed(events)
    stored = orjson.loads(stream.answer())
    assert stored == httpx.get(f"{sim.base_url}/responses/{stored['id']}").json()
    first_output = next(
        i for i, e in enumerate(events) if b"output_item.added" in e and b'"reasoning"' not in e
    )
    assert set(decisions[:first_output]) == {None}
    assert set(decisions[first_output:]) == {decided}
    if decided == "recall":
        assert DOOR.tool_calls(stream.answer(), RECALL_TOOL) is not None


def test_a_streamed_recall_turn_goes_back_valid(sim: Simulator) -> None:
    """The reasoning seal and the call read from a stream pass the simulator's checks."""
    request = DOOR.parse(orjson.dumps(body(stream=True)))
    sim.enqueue(Reply(reasoning_content="Need m3.", tool_calls=[RECALL_CALL]))
    raw = post(sim, DOOR.render(request, request.messages, None, [RECALL])).content
    stream, _ = fed(split_events(raw))
    found = DOOR.tool_calls(stream.answer(), RECALL_TOOL)
    assert found is not None
    view = recalled([*request.messages, found.message], found.calls[0], "m3")
    second = post(sim, DOOR.render(request, view, None, [RECALL]))
    assert second.status_code == 200, second.text
    assert sim.received[-1].problems == []


def test_a_stream_without_its_completed_event_is_built_from_its_items(sim: Simulator) -> None:
    events = streamed(sim, Reply(content="Wait.", tool_calls=[RECALL_CALL]))
    cut = [e for e in events if not e.startswith(b"event: response.completed")]
    stream, _ = fed(cut)
    built = orjson.loads(stream.answer())
    final = orjson.loads(event_data(events[-1]))["response"]
    assert built["id"] == final["id"] and built["output"] == final["output"]
    found = DOOR.tool_calls(stream.answer(), RECALL_TOOL)
    assert found is not None and found.calls[0].arguments == '{"handle": "m3"}'


def sdk_final(sim: Simulator, events: list[bytes]) -> Any:
    serve_events(sim, events)
    with openai.OpenAI(base_url=sim.base_url, api_key="sk", max_retries=0) as client:
        with client.responses.stream(model=MODEL, input="hi") as stream:
            for _ in stream:
                pass
            return stream.get_final_response()


def filtered(events: list[bytes]) -> list[bytes]:
    hider = DOOR.call_filter(RECALL_TOOL)
    return [out for event in events if (out := hider.event(event)) is not None]


def test_the_client_never_sees_the_tool_in_a_relayed_stream(sim: Simulator) -> None:
    events = streamed(sim, Reply(content="Let me check.", tool_calls=[RECALL_CALL, SHELL_CALL]))
    shown = filtered(events)
    assert RECALL_TOOL.encode() not in b"".join(shown)
    final = sdk_final(sim, shown)
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output[1].name == "shell" and final.output_text == "Let me check."
    message_events = [e for e in events if b'"output_index":0' in e]
    assert all(any(out is e for out in shown) for e in message_events)  # the same bytes


def test_items_after_a_hidden_call_are_renumbered() -> None:
    """A call first, then text and a client call: the SDK's accumulator checks the indexes."""
    ids = OutputIds()
    counter = iter(range(100))
    items = output_items(
        Reply(content="Done.", tool_calls=[SHELL_CALL, RECALL_CALL]),
        ids,
        lambda: f"call_{next(counter)}",
        Seal(b"k"),
        encrypted=False,
    )
    message, shell, recall = items
    order = [recall, message, shell]
    response = response_object("resp_1", body())
    final = {**response, "status": "completed", "output": order}
    events = [encode(e) for e in response_events(response, final, order)]
    shown = filtered(events)
    assert RECALL_TOOL.encode() not in b"".join(shown)
    indexes = [orjson.loads(event_data(e)).get("output_index") for e in shown]
    assert [i for i in indexes if i is not None] == sorted(i for i in indexes if i is not None)
    assert {i for i in indexes if i is not None} == {0, 1}
    with Simulator(default=ModelSpec(window=128_000)) as sim:
        final_seen = sdk_final(sim, shown)
    assert [item.type for item in final_seen.output] == ["message", "function_call"]
    assert final_seen.output_text == "Done." and final_seen.output[1].name == "shell"
