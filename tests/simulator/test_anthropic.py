"""Tests of the simulator's Anthropic Messages dialect, driven with the official ``anthropic`` SDK
(sync and async, created and streamed): the event sequence, usage with prompt-cache figures, the
overflow errors, tool pairing, signed thinking, count_tokens, and the scripted agent."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from tests.simulator import (
    Disconnect,
    Hang,
    Reply,
    ScriptedAgent,
    Simulator,
    StreamError,
)
from tests.simulator.agent import CLAUDE_CODE_COMPACTION

# Fixtures (tests/simulator/fixtures.py says why they are imported "as" themselves).
from tests.simulator.anthropic_fixtures import (
    BASH,
    SYSTEM,
    VERSION,
    sse,
    tool_result,
    tool_use,
    user,
)
from tests.simulator.anthropic_fixtures import client as client
from tests.simulator.anthropic_fixtures import reset as reset
from tests.simulator.anthropic_fixtures import sim as sim
from tests.simulator.testing import long_text


def test_create_answers_a_message_and_logs_the_request(
    sim: Simulator, client: anthropic.Anthropic
) -> None:
    answer = client.messages.create(
        model="claude-x",
        max_tokens=64,
        system="Be brief.",
        messages=[user("hello there"), {"role": "system", "content": "Env: linux"}],  # type: ignore[list-item]
    )
    assert answer.type == "message" and answer.role == "assistant"
    assert [b.type for b in answer.content] == ["text"]
    assert answer.content[0].text == "ok: hello there"  # type: ignore[union-attr]
    assert answer.stop_reason == "end_turn"
    (rec,) = sim.messages_requests
    assert rec.path == "/v1/messages" and rec.status == 200 and rec.problems == []
    assert rec.headers["authorization"] == "Bearer sk-ant-one"  # how this SDK sends api_key
    assert rec.headers["anthropic-version"]
    assert answer.usage.input_tokens == rec.prompt_tokens  # no breakpoint: all plain input
    assert answer.usage.cache_read_input_tokens == 0


def test_stream_sends_the_real_event_sequence(sim: Simulator) -> None:
    sim.enqueue(
        Reply(
            content="Let me look.",
            tool_calls=[{"name": "Bash", "arguments": {"command": "ls -la"}}],
            reasoning_content="I should list the files.",
        )
    )
    body = {
        "model": "claude-x",
        "max_tokens": 2048,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [BASH],
        "messages": [user("list files")],
    }
    response = httpx.post(f"{sim.base_url}/messages", json=body, headers=VERSION)
    events = sse(response)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    usage = events[0][1]["message"]["usage"]
    assert set(usage) >= {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = {d["delta"]["type"] for n, d in events if n == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    arguments = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(arguments) == {"command": "ls -la"}
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] > 0


def test_sdk_stream_accumulates_the_final_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="claude-x", max_tokens=64, messages=[user("a long enough question to split")]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "ok: a long enough question to split"
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.usage.output_tokens > 0


async def test_async_create_and_stream(sim: Simulator) -> None:
    async with anthropic.AsyncAnthropic(base_url=sim.url, api_key="k", max_retries=0) as client:
        answer = await client.messages.create(
            model="claude-x", max_tokens=64, messages=[user("async hello")]
        )
        async with client.messages.stream(
            model="claude-x", max_tokens=64, messages=[user("async stream")]
        ) as stream:
            final = await stream.get_final_message()
    assert answer.content[0].text == "ok: async hello"  # type: ignore[union-attr]
    assert final.content[0].text == "ok: async stream"  # type: ignore[union-attr]
    assert [r.stream for r in sim.messages_requests] == [False, True]


def test_two_requests_sharing_a_prefix_read_it_from_the_cache(
    sim: Simulator, client: anthropic.Anthropic
) -> None:
    first = client.messages.create(
        model="claude-x",
        max_tokens=64,
        system=SYSTEM,
        messages=[user("first question")],  # type: ignore[arg-type]
    )
    second = client.messages.create(
        model="claude-x",
        max_tokens=64,
        system=SYSTEM,
        messages=[user("second question")],  # type: ignore[arg-type]
    )
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens > 200
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert first.usage.cache_creation is not None
    five_minutes = first.usage.cache_creation.ephemeral_5m_input_tokens
    assert five_minutes == first.usage.cache_creation_input_tokens
    for answer, rec in zip((first, second), sim.messages_requests, strict=True):
        u = answer.usage
        total = u.input_tokens + (u.cache_creation_input_tokens or 0)
        assert total + (u.cache_read_input_tokens or 0) == rec.prompt_tokens
    other_key = client.with_options(api_key="sk-ant-two")
    third = other_key.messages.create(
        model="claude-x",
        max_tokens=64,
        system=SYSTEM,
        messages=[user("third question")],  # type: ignore[arg-type]
    )
    assert third.usage.cache_read_input_tokens == 0  # the cache is per key


def test_a_moved_breakpoint_reads_the_previous_turns_prefix(client: anthropic.Anthropic) -> None:
    def marked(text: str) -> dict[str, Any]:
        block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        return {"role": "user", "content": [block]}

    turn1 = [marked(long_text(200))]
    first = client.messages.create(model="claude-x", max_tokens=8, messages=turn1)  # type: ignore[arg-type]
    turn2 = [user(long_text(200)), {"role": "assistant", "content": "ok"}, marked("next")]
    second = client.messages.create(model="claude-x", max_tokens=8, messages=turn2)  # type: ignore[arg-type]
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens and second.usage.cache_creation_input_tokens > 0


def test_more_than_four_breakpoints_is_refused(client: anthropic.Anthropic) -> None:
    blocks = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-x",
            max_tokens=8,
            messages=[{"role": "user", "content": blocks}],  # type: ignore[list-item]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        },
    }


def test_prompt_too_long(sim: Simulator, client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-small", max_tokens=10, messages=[user(long_text(300))])
    (rec,) = sim.messages_requests
    assert rec.prompt_tokens is not None and rec.prompt_tokens > 300
    message = f"prompt is too long: {rec.prompt_tokens} tokens > 300 maximum"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
    }
    assert rec.outcome == "overflow"


def test_request_too_large(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="claude-bytes", max_tokens=10, messages=[user("x" * 3_000)])
    assert caught.value.status_code == 413
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "request_too_large"
    assert "The maximum request size is 2000 bytes" in error["message"]


def test_overflow_as_an_error_event_inside_a_200_stream(sim: Simulator) -> None:
    body = {
        "model": "claude-event",
        "max_tokens": 10,
        "stream": True,
        "messages": [user(long_text(300))],
    }
    response = httpx.post(f"{sim.base_url}/messages", json=body, headers=VERSION)
    assert response.status_code == 200
    events = sse(response)
    assert [name for name, _ in events] == ["message_start", "error"]
    assert events[1][1]["error"]["message"].startswith("prompt is too long: ")
    client = anthropic.Anthropic(base_url=sim.url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIStatusError, match="prompt is too long"):
        with client.messages.stream(**{k: v for k, v in body.items() if k != "stream"}) as s:
            s.until_done()


def test_mid_stream_failures(sim: Simulator, client: anthropic.Anthropic) -> None:
    sim.enqueue(StreamError(after_chunks=3), Disconnect(after_chunks=2))
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="claude-x", max_tokens=8, messages=[user("a")]) as s:
            s.until_done()
    # This SDK lets the transport's error through when the body breaks off mid-stream.
    broken = (anthropic.APIConnectionError, httpx2.RemoteProtocolError)
    with pytest.raises(broken):
        with client.messages.stream(model="claude-x", max_tokens=8, messages=[user("b")]) as s:
            s.until_done()
    assert [r.outcome for r in sim.messages_requests] == ["stream_error", "disconnect"]


def test_a_stalled_stream_resumes_and_a_stalled_answer_follows(
    sim: Simulator, client: anthropic.Anthropic
) -> None:
    sim.enqueue(Hang(seconds=0.2, after_chunks=3), Hang(seconds=0.2, then=Reply(content="late")))
    with client.messages.stream(model="claude-x", max_tokens=8, messages=[user("slow")]) as s:
        assert s.get_final_text() == "ok: slow"
    answer = client.messages.create(model="claude-x", max_tokens=8, messages=[user("x")])
    assert answer.content[0].text == "late"  # type: ignore[union-attr]
    assert [r.outcome for r in sim.messages_requests] == ["reply", "reply"]


def test_count_tokens_matches_the_billed_prompt(
    sim: Simulator, client: anthropic.Anthropic
) -> None:
    kwargs: dict[str, Any] = {"model": "claude-x", "system": SYSTEM, "messages": [user("count")]}
    counted = client.messages.count_tokens(**kwargs)
    answer = client.messages.create(max_tokens=8, **kwargs)
    u = answer.usage
    total = u.input_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
    assert counted.input_tokens == total
    assert sim.received[0].path == "/v1/messages/count_tokens"
    assert not sim.received[0].is_messages  # count_tokens is not a turn
    sim.messages_api.count_tokens_enabled = False
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(**kwargs)


def test_version_header_key_and_probe(sim: Simulator) -> None:
    body = {"model": "claude-x", "max_tokens": 8, "messages": [user("hi")]}
    missing = httpx.post(f"{sim.base_url}/messages", json=body)
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "anthropic-version: header is required"
    sim.required_api_key = "sk-right"
    wrong = httpx.post(
        f"{sim.base_url}/messages", json=body, headers={**VERSION, "x-api-key": "no"}
    )
    assert wrong.status_code == 401
    assert wrong.json()["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
    bearer = {**VERSION, "authorization": "Bearer sk-right"}
    assert httpx.post(f"{sim.base_url}/messages", json=body, headers=bearer).status_code == 200
    assert httpx.head(sim.url + "/").status_code == 200


def test_models_list_in_the_anthropic_shape(sim: Simulator, client: anthropic.Anthropic) -> None:
    page = client.models.list()
    assert [m.id for m in page.data] == ["claude-small", "claude-bytes", "claude-event"]
    assert client.models.retrieve("claude-small").type == "model"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-none")
    openai_shape = httpx.get(f"{sim.base_url}/models").json()  # no anthropic-version header
    assert openai_shape["object"] == "list"


def test_scripted_agent_runs_k_rounds_and_survives_a_shortened_history(
    sim: Simulator, client: anthropic.Anthropic
) -> None:
    sim.responder = ScriptedAgent(turns=4)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    messages: list[dict[str, Any]] = [user("run the commands")]
    rounds = 0
    while True:
        answer = client.messages.create(
            model="claude-x",
            max_tokens=2048,
            thinking=thinking,
            tools=[BASH],
            messages=messages,  # type: ignore[arg-type]
        )
        blocks = [b.model_dump(exclude_none=True) for b in answer.content]
        messages.append({"role": "assistant", "content": blocks})
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if not calls:
            break
        assert blocks[0]["type"] == "thinking" and calls[0]["name"] == "Bash"
        assert calls[0]["input"]["command"].startswith("seq ")
        rounds += 1
        messages.append({"role": "user", "content": [tool_result(calls[0]["id"])]})
        if rounds == 3:  # a proxy dropped the first two rounds
            messages = [messages[0], *messages[-4:]]
    assert rounds == 4
    assert answer.content[-1].text.startswith("Done: ran 4 commands")  # type: ignore[union-attr]
    assert all(r.problems == [] for r in sim.messages_requests)


def test_scripted_agent_answers_claude_codes_compaction_and_goes_on(
    client: anthropic.Anthropic, sim: Simulator
) -> None:
    sim.responder = ScriptedAgent(turns=5)
    call = tool_use("toolu_01SimR0002abcdef")
    request = {"type": "text", "text": CLAUDE_CODE_COMPACTION + " ... <summary> ..."}
    history = [
        user("run the commands"),
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [tool_result(call["id"]), request]},
    ]
    answer = client.messages.create(model="claude-x", max_tokens=64, tools=[BASH], messages=history)  # type: ignore[arg-type]
    summary = answer.content[0].text  # type: ignore[union-attr]
    assert "<summary>" in summary and "3 rounds done" in summary and "toolu_01SimR0002" in summary
    after = [user(summary + "\nContinue.")]
    step = client.messages.create(model="claude-x", max_tokens=64, tools=[BASH], messages=after)  # type: ignore[arg-type]
    calls = [b for b in step.content if b.type == "tool_use"]
    assert calls and calls[0].id.startswith("toolu_01SimR0003")
