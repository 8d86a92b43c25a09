"""The simulator's OpenAI Responses dialect, driven with the official openai SDK (sync and
async, create and stream) and raw HTTP where the wire format itself is under test."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.simulator import Disconnect, Fail, Hang, ModelSpec, Reply, Simulator, StreamError
from tests.simulator.fixtures import simulator_fixture
from tests.simulator.responses_output import OVERFLOW_MESSAGE
from tests.simulator.shell_agent import ShellAgent

SMALL = 300


MODELS = {
    "small": ModelSpec(window=SMALL),
    "small-event": ModelSpec(window=SMALL, stream_errors="event"),
}
sim = simulator_fixture(MODELS, ModelSpec(window=128_000), scope="module")


@pytest.fixture(autouse=True)
def _reset(sim: Simulator) -> None:
    sim.clear()
    sim.responder = None


@pytest.fixture(scope="module")
def client(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.base_url, timeout=10) as c:
        yield c


def sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every event of a Responses stream."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: "), block
        events.append((name_line[7:], json.loads(data_line[6:])))
    return events


def words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))


TOOL_CALL = Reply(
    content="Let me look.",
    reasoning_content="The user wants the listing.",
    tool_calls=[{"name": "shell", "arguments": {"command": ["ls"]}, "id": "call_abc"}],
)


# ------------------------------------------------------------------ create and stream
def test_create_returns_a_completed_response_with_counted_usage(
    sim: Simulator, client: openai.OpenAI
) -> None:
    response = client.responses.create(model="m", instructions="Be brief.", input="hello there")
    rec = sim.received[-1]
    assert (rec.method, rec.path, rec.is_responses, rec.is_chat) == (
        "POST",
        "/v1/responses",
        True,
        False,
    )
    assert response.status == "completed" and response.output_text == "ok: hello there"
    assert response.output[0].type == "message" and response.output[0].id.startswith("msg_")
    usage = response.usage
    assert usage is not None and usage.input_tokens == rec.prompt_tokens
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens > usage.input_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert sim.responses_requests == [rec]


def test_stream_sends_the_real_event_sequence(sim: Simulator, http: httpx.Client) -> None:
    sim.enqueue(TOOL_CALL)
    body = {
        "model": "m",
        "input": "list files",
        "stream": True,
        "include": ["reasoning.encrypted_content"],
    }
    answer = http.post("/responses", json=body)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = sse(answer.text)
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert (
        names.count("response.output_item.added") == 3 == names.count("response.output_item.done")
    )
    for expected in (
        "response.reasoning_summary_text.delta",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ):
        assert expected in names
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert text == "Let me look." and json.loads(args) == {"command": ["ls"]}
    assert final["output"][2]["call_id"] == "call_abc"
    assert final["output"][0]["encrypted_content"]
    usage = final["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] > 0
    assert usage["input_tokens"] == sim.received[-1].prompt_tokens


def test_sdk_stream_sync(client: openai.OpenAI, sim: Simulator) -> None:
    sim.enqueue(TOOL_CALL)
    with client.responses.stream(model="m", input="list files") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[0].encrypted_content is None  # not asked for with include
    assert final.output_text == "Let me look."


async def test_sdk_create_and_stream_async(sim: Simulator) -> None:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as client:
        created = await client.responses.create(model="m", input="async hello")
        async with client.responses.stream(model="m", input="async stream") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert created.output_text == "ok: async hello"
    assert "".join(deltas) == final.output_text == "ok: async stream"
    assert len(deltas) > 1
    assert [r.path for r in sim.responses_requests] == ["/v1/responses"] * 2


def test_custom_tool_call_streams_its_input(sim: Simulator, http: httpx.Client) -> None:
    sim.enqueue(Reply(tool_calls=[{"type": "custom", "name": "apply_patch", "input": "*** x"}]))
    answer = http.post("/responses", json={"model": "m", "input": "patch", "stream": True})
    events = sse(answer.text)
    names = [name for name, _ in events]
    assert "response.custom_tool_call_input.delta" in names
    item = events[-1][1]["response"]["output"][0]
    assert (item["type"], item["name"], item["input"]) == (
        "custom_tool_call",
        "apply_patch",
        "*** x",
    )


# ------------------------------------------------------------------ caching
def test_cached_tokens_are_the_shared_prefix_of_the_same_cache_key(
    client: openai.OpenAI,
) -> None:
    history: list[Any] = [{"role": "developer", "content": words(1500)}]
    first = client.responses.create(model="m", input=history, prompt_cache_key="s1")
    assert first.usage is not None and first.usage.input_tokens_details.cached_tokens == 0
    history.append({"role": "user", "content": "next question"})
    second = client.responses.create(model="m", input=history, prompt_cache_key="s1")
    assert second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    assert 1024 <= cached < second.usage.input_tokens and cached % 128 == 0
    assert first.usage.input_tokens - cached < 128  # the whole first prompt, to 128 tokens
    other = client.responses.create(model="m", input=history, prompt_cache_key="s2")
    assert other.usage is not None and other.usage.input_tokens_details.cached_tokens == 0
    changed = [{"role": "developer", "content": "changed " + words(1500)}, history[1]]
    third = client.responses.create(model="m", input=changed, prompt_cache_key="s1")
    assert third.usage is not None and third.usage.input_tokens_details.cached_tokens == 0


# ------------------------------------------------------------------ overflow
def test_overflow_as_a_status(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Reply(content="never sent"))
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="small", input=words(400))
    error = caught.value.body
    assert isinstance(error, dict)
    assert error == {
        "message": OVERFLOW_MESSAGE,
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
    assert not any(ch.isdigit() for ch in error["message"])
    assert sim.received[-1].outcome == "overflow" and sim.queued == 1
    assert client.responses.create(model="small", input="short").output_text == "never sent"


def test_overflow_as_response_failed_inside_a_200_stream(
    sim: Simulator, http: httpx.Client, client: openai.OpenAI
) -> None:
    body = {"model": "small-event", "input": words(400), "stream": True}
    answer = http.post("/responses", json=body)
    assert answer.status_code == 200
    events = sse(answer.text)
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "context_length_exceeded", "message": OVERFLOW_MESSAGE}
    with client.responses.stream(model="small-event", input=words(400)) as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == "response.failed"
    with pytest.raises(openai.BadRequestError):  # not streamed: the status, as ever
        client.responses.create(model="small-event", input=words(400))


def test_max_output_tokens_count_against_the_window(client: openai.OpenAI) -> None:
    client.responses.create(model="small", input=words(50))
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="small", input=words(50), max_output_tokens=SMALL)


# ------------------------------------------------------------------ input validation
def _tool_round(client: openai.OpenAI, sim: Simulator) -> list[dict[str, Any]]:
    """A user turn, the sealed reasoning + message + call it got, and the call's output."""
    sim.enqueue(TOOL_CALL)
    first = client.responses.create(
        model="m", input="list", include=["reasoning.encrypted_content"], store=False
    )
    output = [item.model_dump(exclude_none=True) for item in first.output]
    result = {"type": "function_call_output", "call_id": "call_abc", "output": "a.txt b.txt"}
    return [{"role": "user", "content": "list"}, *output, result]


def test_sealed_reasoning_round_trips_and_tampering_is_rejected(
    sim: Simulator, client: openai.OpenAI
) -> None:
    history = _tool_round(client, sim)
    assert client.responses.create(model="m", input=history).output_text == "ok: a.txt b.txt"
    assert sim.received[-1].problems == []
    sealed = history[1]["encrypted_content"]
    for field, value in (
        ("encrypted_content", sealed[:-8] + ("A" if sealed[-9] != "A" else "B") + sealed[-7:]),
        ("encrypted_content", "gAAAAABnot-ours=="),
        ("summary", [{"type": "summary_text", "text": "edited"}]),
        ("id", "rs_other"),
    ):
        tampered = copy.deepcopy(history)
        tampered[1][field] = value
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input=tampered)
        body = caught.value.body
        assert isinstance(body, dict) and body["code"] == "invalid_encrypted_content"
        assert "could not be verified" in body["message"]
        assert sim.received[-1].outcome == "invalid_input" and sim.received[-1].problems


def test_reasoning_from_another_simulator_is_rejected(
    client: openai.OpenAI, sim: Simulator
) -> None:
    history = _tool_round(client, sim)
    with Simulator() as other, openai.OpenAI(base_url=other.base_url, api_key="k") as elsewhere:
        with pytest.raises(openai.BadRequestError) as caught:
            elsewhere.responses.create(model="m", input=history)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_encrypted_content"


def test_orphan_and_unanswered_calls_are_rejected(sim: Simulator, client: openai.OpenAI) -> None:
    history = _tool_round(client, sim)
    orphan = [history[0], history[-1]]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input=orphan)
    assert caught.value.body == {
        "message": "No tool call found for function call output with call_id call_abc.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
    assert sim.received[-1].problems == [
        "input[1]: No tool call found for function call output with call_id call_abc."
    ]
    with pytest.raises(openai.BadRequestError) as unanswered:
        client.responses.create(model="m", input=history[:-1])
    assert isinstance(unanswered.value.body, dict)
    assert unanswered.value.body["message"] == "No tool output found for function call call_abc."


# ------------------------------------------------------------------ stored responses
def test_previous_response_id_prepends_the_stored_conversation(
    sim: Simulator, client: openai.OpenAI
) -> None:
    first = client.responses.create(model="m", input=words(200))
    alone = client.responses.create(model="m", input="and then?", store=False)
    chained = client.responses.create(model="m", input="and then?", previous_response_id=first.id)
    assert chained.usage is not None and alone.usage is not None and first.usage is not None
    assert chained.usage.input_tokens > alone.usage.input_tokens + first.usage.input_tokens - 10
    assert chained.previous_response_id == first.id
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="m", input="x", previous_response_id="resp_missing")
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(alone.id)  # store=False: nothing kept


def test_retrieve_input_items_input_tokens_and_delete(
    sim: Simulator, client: openai.OpenAI, http: httpx.Client
) -> None:
    created = client.responses.create(model="m", input=[{"role": "user", "content": "one"}])
    assert client.responses.retrieve(created.id).output_text == created.output_text
    items = client.responses.input_items.list(created.id)
    assert [(item.type, item.id.startswith("msg_")) for item in items.data] == [("message", True)]
    counted = client.responses.input_tokens.count(model="m", input="hello there")
    assert counted.object == "response.input_tokens"
    usage = client.responses.create(model="m", input="hello there").usage
    assert usage is not None and counted.input_tokens == usage.input_tokens
    assert http.delete(f"/responses/{created.id}").json() == {
        "id": created.id,
        "object": "response",
        "deleted": True,
    }
    assert httpx.get(f"{sim.url}/responses/{created.id}").status_code == 404  # no /v1 prefix
    paths = [(r.method, r.path) for r in sim.responses_requests]
    assert ("GET", f"/v1/responses/{created.id}/input_items") in paths
    assert ("POST", "/v1/responses/input_tokens") in paths
    assert ("DELETE", f"/v1/responses/{created.id}") in paths
    assert ("GET", f"/responses/{created.id}") in paths


# ------------------------------------------------------------------ scripted failures
def test_scripted_failures_apply_to_responses(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Fail(503), Disconnect(after_chunks=3), StreamError(after_chunks=4))
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="m", input="x")
    with pytest.raises(openai.APIConnectionError):
        with client.responses.stream(model="m", input="x") as stream:
            list(stream)
    with client.responses.stream(model="m", input="x") as stream:
        events = [event.type for event in stream]
    assert len(events) == 5 and events[-1] == "response.failed"
    assert [r.outcome for r in sim.received] == ["fail", "disconnect", "stream_error"]


def test_a_stream_can_stall_midway_and_go_on(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Hang(seconds=0.3, after_chunks=3, then=Reply(content="slow answer")))
    with client.responses.stream(model="m", input="x") as stream:
        final = stream.get_final_response()
    assert final.output_text == "slow answer"
    assert sim.received[-1].outcome == "reply"


# ------------------------------------------------------------------ the scripted agent
SHELL = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


def test_scripted_agent_calls_the_shell_for_k_turns_then_answers(
    sim: Simulator, client: openai.OpenAI
) -> None:
    sim.responder = ShellAgent(turns=3)
    history: list[Any] = [{"role": "user", "content": "work"}]
    commands = []
    for _ in range(3):
        answer = client.responses.create(
            model="m", input=history, tools=[SHELL], include=["reasoning.encrypted_content"]
        )
        calls = [item for item in answer.output if item.type == "function_call"]
        assert [item.type for item in answer.output] == ["reasoning", "function_call"]
        commands.append(json.loads(calls[0].arguments)["cmd"])
        history += [item.model_dump(exclude_none=True) for item in answer.output]
        history.append(
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "ok"}
        )
    final = client.responses.create(model="m", input=history, tools=[SHELL])
    assert final.output_text.startswith("Done: ran 3 steps")
    assert [c.split(";")[0] for c in commands] == [
        'echo "step 1"',
        'echo "step 2"',
        'echo "step 3"',
    ]
    assert all(not r.problems for r in sim.received)


def test_scripted_agent_continues_after_its_history_was_compressed(
    sim: Simulator, client: openai.OpenAI
) -> None:
    sim.responder = ShellAgent(turns=10, reasoning=False)
    history: list[Any] = [{"role": "user", "content": "work"}]
    for _ in range(5):
        answer = client.responses.create(model="m", input=history, tools=[SHELL])
        call = answer.output[0]
        assert call.type == "function_call"
        history += [call.model_dump(exclude_none=True)]
        history.append({"type": "function_call_output", "call_id": call.call_id, "output": "ok"})
    kept_tail = [history[0], {"role": "user", "content": "summary of steps 1-4"}, *history[-2:]]
    answer = client.responses.create(model="m", input=kept_tail, tools=[SHELL])
    assert answer.output[0].type == "function_call"
    assert "step 6" in answer.output[0].arguments
    compacted = [history[0], {"role": "user", "content": "summary of steps 1-6"}]
    answer = client.responses.create(model="m", input=compacted, tools=[SHELL])
    assert "step 7" in answer.output[0].arguments  # same session, none of its calls left
    answer = client.responses.create(
        model="m", input=compacted, tools=[SHELL], prompt_cache_key="k"
    )
    assert "step 1" in answer.output[0].arguments  # another session starts over


def test_scripted_agent_uses_the_only_custom_tool_and_leaves_toolless_requests_alone(
    sim: Simulator, client: openai.OpenAI
) -> None:
    sim.responder = ShellAgent(turns=2)
    custom = {"type": "custom", "name": "run", "description": "run a shell command"}
    answer = client.responses.create(model="m", input="go", tools=[custom])  # type: ignore[list-item]
    call = answer.output[-1]
    assert call.type == "custom_tool_call" and call.input.startswith('echo "step 1"')
    plain = client.responses.create(model="m", input="summarize this")
    assert plain.output_text == "ok: summarize this"
    for prompt in ("Write the Historical Task Snapshot of: ...", "CONTEXT CHECKPOINT COMPACTION"):
        answer = client.responses.create(model="m", input=prompt, tools=[SHELL])
        assert [item.type for item in answer.output] == ["message"]  # a summary, no call


# ------------------------------------------------------------------ server-side compaction
def test_compaction_trigger_and_compact_endpoint_return_sealed_compaction_items(
    sim: Simulator, client: openai.OpenAI, http: httpx.Client
) -> None:
    history: list[Any] = [
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": words(300)},
        {"role": "user", "content": "now the tests"},
    ]
    trigger = {"type": "compaction_trigger"}
    answer = http.post(
        "/responses", json={"model": "m", "input": [*history, trigger], "stream": True}
    )
    events = sse(answer.text)
    assert [n for n, _ in events][2:] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    output = events[-1][1]["response"]["output"]
    assert [item["type"] for item in output] == ["compaction"]
    compacted = [history[0], output[0], {"role": "user", "content": "go on"}]
    after = client.responses.create(model="m", input=compacted)
    full = client.responses.create(
        model="m", input=[*history, {"role": "user", "content": "go on"}]
    )
    assert after.usage is not None and full.usage is not None
    assert 10 < after.usage.input_tokens < full.usage.input_tokens
    tampered = copy.deepcopy(compacted)
    tampered[1]["encrypted_content"] = tampered[1]["encrypted_content"][:-3] + "abc"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input=tampered)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_encrypted_content"
    assert output[0]["id"] in caught.value.body["message"]

    page = http.post("/responses/compact", json={"model": "m", "input": history}).json()
    assert page["object"] == "response.compaction" and page["id"].startswith("cmp_")
    assert [item.get("role", item["type"]) for item in page["output"]] == [
        "user",
        "user",
        "compaction",
    ]
    assert page["usage"]["input_tokens"] == sim.received[-1].prompt_tokens
    assert client.responses.create(model="m", input=page["output"]).status == "completed"
