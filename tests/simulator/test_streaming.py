"""Tests of the provider simulator's SSE streams, driven by the openai SDK (sync and async)
and httpx."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai

from tests.simulator import Reply, Simulator

# Fixtures (fixtures.py says why they are imported "as" themselves).
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import http as http
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.testing import sse_events, user


def test_stream_sse_sequence_without_usage(http: httpx.Client) -> None:
    body = {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [user("please say something long enough to be split")],
    }
    r = http.post("/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content_chunks = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) >= 3
    text = "".join(c["choices"][0]["delta"]["content"] for c in content_chunks)
    assert text == "ok: please say something long enough to be split"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["delta"] == {}


def test_stream_usage_only_when_asked_and_supported(sim: Simulator, http: httpx.Client) -> None:
    base = {"stream": True, "messages": [user("hi")], "stream_options": {"include_usage": True}}
    chunks = [
        json.loads(e)
        for e in sse_events(http.post("/chat/completions", json={**base, "model": "gpt-4o-mini"}))[
            :-1
        ]
    ]
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] == sim.received[-1].prompt_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"

    events = sse_events(http.post("/chat/completions", json={**base, "model": "no-stream-usage"}))
    assert events[-1] == "[DONE]"
    assert all(json.loads(e)["choices"] for e in events[:-1])
    assert all("usage" not in json.loads(e) for e in events[:-1])


def test_stream_sdk_sync_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[user("stream me please")],
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage, finish = [], None, None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == "ok: stream me please"
    assert finish == "stop"
    assert usage is not None and usage.prompt_tokens > 0


async def test_stream_tool_calls_async_sdk(sim: Simulator) -> None:
    args = json.dumps({"path": "src/very/long/path/module.py", "start": 1, "end": 200})
    sim.enqueue(
        Reply(
            tool_calls=[
                {"name": "read_file", "arguments": args},
                {"name": "grep", "arguments": {"pattern": "TODO"}},
            ]
        )
    )
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[user("go")], stream=True
        )
        calls: dict[int, dict[str, str]] = {}
        fragments = 0
        finish = None
        async for chunk in stream:
            delta = chunk.choices[0].delta
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
                    fragments += 1
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0] == {"id": "call_1", "name": "read_file", "arguments": args}
    assert calls[1]["name"] == "grep" and json.loads(calls[1]["arguments"]) == {"pattern": "TODO"}
    assert fragments > 3  # arguments arrive in several fragments


async def test_async_nonstream_and_concurrency(sim: Simulator) -> None:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as client:
        results = await asyncio.gather(
            *[
                client.chat.completions.create(model="gpt-4o-mini", messages=[user(f"msg {i}")])
                for i in range(8)
            ]
        )
    assert sorted(r.choices[0].message.content or "" for r in results) == sorted(
        f"ok: msg {i}" for i in range(8)
    )
    assert len(sim.received) == 8


def test_stream_is_delivered_incrementally(sim: Simulator, http: httpx.Client) -> None:
    sim.enqueue(Reply(content="alpha beta gamma delta epsilon zeta eta theta", chunk_delay_s=0.04))
    arrivals = []
    body = {"model": "gpt-4o-mini", "stream": True, "messages": [user("x")]}
    with http.stream("POST", "/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
    assert len(arrivals) >= 6
    assert arrivals[-1] - arrivals[0] >= 0.15
