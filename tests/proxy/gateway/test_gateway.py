"""The transparent proxy: the OpenAI SDK works through ctxgate exactly as against the provider."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Disconnect, Fail, Hang, Reply, Simulator, StreamError

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello."},
]


@pytest.fixture(params=["aiohttp", "httpx"])
def proxy(request: pytest.FixtureRequest, sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    """ctxgate on each pool that can carry its upstream calls: both must behave the same."""
    settings = settings_for(sim.base_url, db_path, server={"upstream_client": request.param})
    with ProxyServer(settings) as server:
        yield server


def client(base_url: str, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-client-key", max_retries=0, **kwargs)


def chunks_of(stream: Any) -> list[dict[str, Any]]:
    """Chunks without the fields that differ per call (ids, timestamps)."""
    out = []
    for chunk in stream:
        data = chunk.model_dump(exclude={"id", "created"})
        for choice in data.get("choices") or []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                call.pop("id", None)
        out.append(data)
    return out


def test_non_streaming_matches_a_direct_call(sim: Simulator, proxy: ProxyServer) -> None:
    direct = client(sim.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    raw = client(proxy.base_url).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    via = raw.parse()
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert via.usage == direct.usage
    assert raw.headers["x-session-id"].startswith("auto-")
    assert raw.headers["content-type"].startswith("application/json")


def test_body_is_forwarded_byte_for_byte_with_unknown_fields(
    sim: Simulator, proxy: ProxyServer
) -> None:
    body = json.dumps(
        {
            "model": "gpt-4o-mini",
            "messages": MESSAGES,
            "vendor_x": {"keep": [1, 2]},
            "response_format": {"type": "json_object"},
            "tools": [],
            "temperature": 0.3,
        }
    ).encode()
    response = httpx.post(
        proxy.base_url + "/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200
    assert sim.chat_requests[-1].raw == body


def test_upstream_key_replaces_nothing_when_configured(sim: Simulator, proxy: ProxyServer) -> None:
    client(proxy.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    headers = sim.chat_requests[-1].headers
    assert headers["authorization"] == "Bearer sk-upstream-test"
    assert not any(name.startswith("x-stainless") for name in headers)


def test_client_key_is_forwarded_when_upstream_has_none(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings_for(sim.base_url, db_path, api_key=None)) as server:
        client(server.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert sim.chat_requests[-1].headers["authorization"] == "Bearer sk-client-key"


async def test_async_client(sim: Simulator, proxy: ProxyServer) -> None:
    async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as aclient:
        answers = await asyncio.gather(
            *[
                aclient.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=[{"role": "user", "content": f"question {i}"}],
                )
                for i in range(8)
            ]
        )
    assert sorted(a.choices[0].message.content or "" for a in answers) == sorted(
        f"ok: question {i}" for i in range(8)
    )


def test_streaming_matches_a_direct_call(sim: Simulator, proxy: ProxyServer) -> None:
    direct = chunks_of(
        client(sim.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True
        )
    )
    via = chunks_of(
        client(proxy.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True
        )
    )
    assert via == direct
    assert all(chunk["choices"] for chunk in via), "the usage chunk ctxgate asked for is hidden"
    assert sim.chat_requests[-1].body["stream_options"] == {"include_usage": True}


def test_streaming_usage_reaches_a_client_that_asked(sim: Simulator, proxy: ProxyServer) -> None:
    chunks = chunks_of(
        client(proxy.base_url).chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] > 0


def test_streaming_tool_call_deltas_match(sim: Simulator, proxy: ProxyServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    call = Reply(
        tool_calls=[
            {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
            {"name": "read_file", "arguments": '{"path": "README.md"}'},
        ]
    )
    sim.enqueue(call)
    direct = chunks_of(
        client(sim.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, tools=tools, stream=True
        )
    )  # type: ignore[arg-type]
    sim.enqueue(call)
    via = chunks_of(
        client(proxy.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, tools=tools, stream=True
        )
    )  # type: ignore[arg-type]
    assert via == direct
    assert any(c["choices"][0]["delta"].get("tool_calls") for c in via)


def test_tool_call_history_passes_through(sim: Simulator, proxy: ProxyServer) -> None:
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    result = client(proxy.base_url).chat.completions.create(model="gpt-4o-mini", messages=messages)  # type: ignore[arg-type]
    assert result.choices[0].message.content == "ok: print('hi')"
    assert sim.chat_requests[-1].body["messages"] == messages


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "Missing required parameter"),
        (b'{"model": 5, "messages": []}', "'model' must be a non-empty string"),
        (b'{"model": "m", "messages": "hi"}', "'messages' must be a non-empty array"),
        (b'{"model": "m", "messages": [{"role": "robot", "content": "x"}]}', "messages[0].role"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 7}]}', "messages[0].content"),
        (b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}', "tool_call_id"),
        (b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}', "'stream'"),
        (b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": -1}', "'max_tokens'"),
    ],
)
def test_bad_requests_get_a_clear_400(
    sim: Simulator, proxy: ProxyServer, body: bytes, fragment: str
) -> None:
    response = httpx.post(proxy.base_url + "/chat/completions", content=body)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert sim.chat_requests == []


DEEP = "[" * 300 + "]" * 300


def test_json_nested_past_what_can_be_reserialised_gets_a_400_before_any_upstream_call(
    sim: Simulator, proxy: ProxyServer
) -> None:
    # Deriving the session id serialises the opening, which holds the deep value.
    part = f'{{"type":"text","text":"x","deep":{DEEP}}}'
    body = f'{{"model":"m","messages":[{{"role":"user","content":[{part}]}}]}}'
    response = httpx.post(proxy.base_url + "/chat/completions", content=body)
    assert response.status_code == 400, response.text
    assert "nested" in response.json()["error"]["message"]
    assert sim.chat_requests == []


def test_sdk_raises_bad_request_for_wrong_types(proxy: ProxyServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(proxy.base_url).chat.completions.create(model="gpt-4o-mini", messages="hi")  # type: ignore[arg-type]
    assert "'messages' must be a non-empty array" in str(caught.value)


def test_oversized_body_gets_413(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path, server={"max_body_bytes": 2048})
    with ProxyServer(settings) as server:
        big = [{"role": "user", "content": "x" * 4096}]
        with pytest.raises(openai.APIStatusError) as caught:
            client(server.base_url).chat.completions.create(model="gpt-4o-mini", messages=big)  # type: ignore[arg-type]
    assert caught.value.status_code == 413
    assert sim.chat_requests == []


def test_unknown_model_gets_404(sim: Simulator, db_path: str) -> None:
    models = [{"match": "gpt-4o*", "upstream": "sim", "context_length": 128000}]
    with ProxyServer(settings_for(sim.base_url, db_path, models=models)) as server:
        with pytest.raises(openai.NotFoundError) as caught:
            client(server.base_url).chat.completions.create(model="llama-9", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.code == "model_not_found"


def test_upstream_error_is_relayed_with_status_and_body(sim: Simulator, proxy: ProxyServer) -> None:
    body = {
        "error": {
            "message": "The server had an error",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    sim.enqueue(Fail(status=503, body=body, headers={"retry-after": "1"}))
    response = httpx.post(
        proxy.base_url + "/chat/completions", json={"model": "gpt-4o-mini", "messages": MESSAGES}
    )
    assert response.status_code == 503
    assert response.json() == body
    assert response.headers["retry-after"] == "1"


def test_upstream_unreachable_gets_502(db_path: str) -> None:
    from tests.servers import free_port

    settings = settings_for(f"http://127.0.0.1:{free_port()}/v1", db_path)
    with ProxyServer(settings) as server:
        with pytest.raises(openai.APIStatusError) as caught:
            client(server.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert "sk-upstream-test" not in caught.value.response.text


def test_upstream_timeout_gets_504(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path)
    settings = replace(
        settings, upstreams={"sim": replace(settings.upstreams["sim"], timeout_s=0.3)}
    )
    sim.enqueue(Hang(seconds=3))
    with ProxyServer(settings) as server:
        with pytest.raises(openai.APIStatusError) as caught:
            client(server.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 504


def test_mid_stream_failure_reaches_the_client_as_an_error(
    sim: Simulator, proxy: ProxyServer
) -> None:
    sim.enqueue(Disconnect(after_chunks=2))
    stream = client(proxy.base_url).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "a long answer please " * 5}],
        stream=True,
    )
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    assert "interrupted" in str(caught.value) or "before the response" in str(caught.value)


def test_client_leaving_mid_stream_ends_the_upstream_call(
    sim: Simulator, proxy: ProxyServer
) -> None:
    sim.enqueue(Hang(seconds=30, after_chunks=2))
    stream = client(proxy.base_url).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    stream.close()
    # The simulator sees its client (ctxgate) go away long before the 30 s stall ends.
    sim.wait_for(1, predicate=lambda r: r.outcome == "client_gone", timeout=5)
    # ...and the proxy goes on serving.
    answer = client(proxy.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert answer.choices[0].message.content


def test_an_error_event_in_place_of_the_stream_reaches_the_client(
    sim: Simulator, proxy: ProxyServer
) -> None:
    """Not an overflow: nothing to recover, so the event is relayed as the provider sent it."""
    sim.enqueue(StreamError(after_chunks=0))
    stream = client(proxy.base_url).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "server" in str(caught.value).lower() or "error" in str(caught.value).lower()
    assert len(sim.chat_requests) == 1


def test_streamed_error_status_before_first_byte(sim: Simulator, proxy: ProxyServer) -> None:
    sim.enqueue(
        Fail(
            status=400,
            body={"error": {"message": "bad thing", "type": "x", "param": None, "code": "nope"}},
        )
    )
    with pytest.raises(openai.BadRequestError) as caught:
        for _ in client(proxy.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True
        ):
            pass
    assert caught.value.code == "nope"


def test_session_header_is_echoed_and_usage_is_stored(sim: Simulator, proxy: ProxyServer) -> None:
    raw = client(proxy.base_url).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_headers={"X-Session-Id": "my-session"}
    )
    assert raw.headers["x-session-id"] == "my-session"
    assert raw.headers["x-ctxgate-compressed"] == "false"
    usage = raw.parse().usage
    assert usage is not None

    async def stored() -> Any:
        from session.identity import scope_for
        from storage import SessionKey

        store = proxy.services.store
        await store.flush()
        return await store.get_session(SessionKey(scope_for("sk-client-key"), "my-session"))

    record = proxy.run(stored())
    assert record.last_prompt_tokens == usage.prompt_tokens
    assert record.last_message_count == len(MESSAGES)
    assert record.model == "gpt-4o-mini"


def test_models_are_relayed(proxy: ProxyServer) -> None:
    models = client(proxy.base_url).models.list()
    assert "gpt-4o-mini" in {m.id for m in models.data}


def test_health_and_readiness(proxy: ProxyServer) -> None:
    root = proxy.base_url.removesuffix("/v1")
    assert httpx.get(root + "/healthz").json() == {"status": "ok", "pid": os.getpid()}
    assert httpx.get(root + "/readyz").json() == {"status": "ready"}
    assert b"ctxgate_requests_total" in httpx.get(root + "/metrics").content


def test_proxy_keys_are_enforced_and_never_forwarded(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path, auth={"keys": ["ctx-key-1"]})
    with ProxyServer(settings) as server:
        with pytest.raises(openai.AuthenticationError):
            client(server.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        ok = openai.OpenAI(base_url=server.base_url, api_key="ctx-key-1", max_retries=0)
        ok.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert sim.chat_requests[-1].headers["authorization"] == "Bearer sk-upstream-test"
    assert len(sim.chat_requests) == 1


def test_unknown_path_gets_an_openai_envelope(proxy: ProxyServer) -> None:
    # Outside /v1: under it, every path is relayed upstream (tests/proxy/edge/test_relay.py).
    response = httpx.get(f"http://127.0.0.1:{proxy.port}/no-such-thing")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("log_content", [False, True])
def test_message_contents_are_logged_only_when_enabled(
    sim: Simulator, db_path: str, caplog: pytest.LogCaptureFixture, log_content: bool
) -> None:
    settings = settings_for(sim.base_url, db_path, logging={"log_content": log_content})
    secret = "the launch code is 0000-CONTENT-MARKER"
    with caplog.at_level("INFO", logger="ctxgate"), ProxyServer(settings) as server:
        client(server.base_url).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": secret}]
        )
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert (secret in logged) is log_content
