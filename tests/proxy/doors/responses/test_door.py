"""`POST /v1/responses` through ctxgate with the official `openai` SDK (sync and async,
`create` and `stream`), requests kept on the provider, the other Responses routes, errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.config_file import parse_settings
from tests.servers import ProxyServer, settings_for
from tests.simulator import Disconnect, ModelSpec, Reply, Simulator

MODEL = "gpt-sim"
INPUT: list[dict[str, Any]] = [
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Be brief."}],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
]


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(default=ModelSpec(window=128_000)) as simulator:
        yield simulator


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    with ProxyServer(settings_for(sim.base_url, db_path)) as server:
        yield server


def client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)


def test_create_and_stream_relay_the_answer_and_the_clients_bytes(
    sim: Simulator, proxy: ProxyServer
) -> None:
    sim.responder = lambda body: "Hello there."
    sdk = client(proxy)
    raw = sdk.responses.with_raw_response.create(
        model=MODEL, input=INPUT, instructions="Answer in English.", store=False
    )
    answer = raw.parse()
    assert answer.output_text == "Hello there."
    assert answer.usage is not None and answer.usage.input_tokens == sim.received[0].prompt_tokens
    assert raw.headers["x-ctxgate-compressed"] == "false"
    assert sim.received[0].raw == raw.http_request.content  # nothing changed: the same bytes
    assert sim.received[0].path == "/v1/responses"

    with sdk.responses.stream(model=MODEL, input=INPUT, store=False) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "Hello there."
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [r.status for r in sim.received] == [200, 200]
    assert sim.received[1].body["stream"] is True


async def test_async_create_and_stream(sim: Simulator, proxy: ProxyServer) -> None:
    sim.responder = lambda body: "Async hello."
    sdk = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    answer = await sdk.responses.create(model=MODEL, input="Say hello.")
    assert answer.output_text == "Async hello."
    async with sdk.responses.stream(model=MODEL, input=INPUT) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == "Async hello."
    assert final.usage is not None and final.usage.input_tokens == sim.received[1].prompt_tokens
    await sdk.close()


def test_session_id_comes_from_the_header_then_prompt_cache_key(
    sim: Simulator, proxy: ProxyServer
) -> None:
    sdk = client(proxy)
    by_header = sdk.responses.with_raw_response.create(
        model=MODEL, input="hi", prompt_cache_key="key-1", extra_headers={"session-id": "codex-1"}
    )
    assert by_header.headers["x-session-id"] == "codex-1"
    by_key = sdk.responses.with_raw_response.create(
        model=MODEL, input="hi", prompt_cache_key="key-1"
    )
    assert by_key.headers["x-session-id"] == "key-1"
    derived = sdk.responses.with_raw_response.create(model=MODEL, input="hi")
    assert derived.headers["x-session-id"].startswith("auto-")


def test_previous_response_id_is_forwarded_untouched(sim: Simulator, db_path: str) -> None:
    # A tiny window: ctxgate would compress anything it could; it must not touch this one.
    models = [{"match": "*", "upstream": "sim", "context_length": 2048}]
    settings = settings_for(sim.base_url, db_path, models=models)
    with ProxyServer(settings) as server:
        sdk = client(server)
        first = sdk.responses.create(model=MODEL, input="x " * 3000, store=True)
        raw = sdk.responses.with_raw_response.create(
            model=MODEL, input="And now?", previous_response_id=first.id
        )
    assert raw.parse().output_text
    assert raw.headers["x-ctxgate-compressed"] == "false"
    assert raw.headers["x-ctxgate-reason"].startswith("previous_response_id")
    assert sim.received[-1].raw == raw.http_request.content
    assert not any(r.is_summary for r in sim.received)


def test_a_compaction_trigger_goes_to_the_provider_untouched(
    sim: Simulator, proxy: ProxyServer
) -> None:
    items = [*INPUT, {"type": "compaction_trigger"}]
    raw = client(proxy).responses.with_raw_response.create(model=MODEL, input=items)  # type: ignore[arg-type]
    assert raw.headers["x-ctxgate-reason"].startswith("compaction_trigger")
    assert sim.received[-1].raw == raw.http_request.content


def test_the_other_responses_routes_are_relayed(sim: Simulator, proxy: ProxyServer) -> None:
    sdk = client(proxy)
    stored = sdk.responses.create(model=MODEL, input=INPUT, store=True)
    assert sdk.responses.retrieve(stored.id).output_text == stored.output_text
    listed = sdk.responses.input_items.list(stored.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "message"]
    counted = sdk.responses.input_tokens.count(model=MODEL, input=INPUT)
    assert counted.input_tokens == sim.received[0].prompt_tokens
    deleted = sdk.responses.delete(stored.id)
    assert deleted is None
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(stored.id)
    paths = [(r.method, r.path) for r in sim.received]
    assert paths == [
        ("POST", "/v1/responses"),
        ("GET", f"/v1/responses/{stored.id}"),
        ("GET", f"/v1/responses/{stored.id}/input_items"),
        ("POST", "/v1/responses/input_tokens"),
        ("DELETE", f"/v1/responses/{stored.id}"),
        ("GET", f"/v1/responses/{stored.id}"),
    ]


def test_errors_come_in_openais_envelope(sim: Simulator, proxy: ProxyServer) -> None:
    sdk = client(proxy)
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.responses.create(model=MODEL, input="hi", max_output_tokens=0)
    assert "'max_output_tokens' must be a positive integer" in bad.value.message
    answer = httpx.post(f"{proxy.base_url}/responses", json={"input": "hi"})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": "Missing required parameter: 'model'.",
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
    }
    assert sim.received == []


def test_an_upstream_without_the_responses_api_is_named(sim: Simulator, db_path: str) -> None:
    document = {
        "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-up", "apis": ["chat"]}},
        "models": [{"match": "*", "upstream": "sim", "context_length": 128000}],
        "storage": {"url": f"sqlite+aiosqlite:///{db_path}"},
        "logging": {"json": False, "level": "warning"},
    }
    with ProxyServer(parse_settings(document, {})) as server:
        with pytest.raises(openai.BadRequestError) as refused:
            client(server).responses.create(model=MODEL, input="hi")
        with pytest.raises(openai.BadRequestError) as relayed:
            client(server).responses.retrieve("resp_1")
    assert "upstreams.sim.apis" in refused.value.message
    assert "apis" in relayed.value.message
    assert sim.received == []


def test_unchanged_streams_keep_the_providers_bytes(sim: Simulator, proxy: ProxyServer) -> None:
    sim.responder = lambda body: "Bytes."
    sdk = client(proxy)
    stream = sdk.responses.create(model=MODEL, input=INPUT, stream=True)
    events = [orjson.loads(orjson.dumps(event.model_dump(mode="json"))) for event in stream]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_an_overflow_of_a_request_kept_on_the_provider_is_relayed(db_path: str) -> None:
    with Simulator(models={MODEL: ModelSpec(window=6000)}) as small:
        models = [{"match": "*", "upstream": "sim", "context_length": 128_000}]
        with ProxyServer(settings_for(small.base_url, db_path, models=models)) as server:
            sdk = client(server)
            first = sdk.responses.create(model=MODEL, input="x " * 5000, store=True)
            with pytest.raises(openai.BadRequestError) as refused:
                sdk.responses.create(
                    model=MODEL, input="more " * 1500, previous_response_id=first.id
                )
            rule = server.settings.models[0]
            window = server.services.conversations.models.context_length(rule, MODEL)
    assert refused.value.response.headers["x-ctxgate-error"].startswith("forwarded untouched")
    assert [r.outcome for r in small.received] == ["reply", "overflow"]
    assert window == 128_000  # the small new input says nothing about the model's window


def test_a_stream_cut_by_the_provider_ends_with_an_error_event(
    sim: Simulator, proxy: ProxyServer
) -> None:
    sim.enqueue(Disconnect(after_chunks=4, reply=Reply(content="a long answer " * 20)))
    stream = client(proxy).responses.create(model=MODEL, input=INPUT, stream=True)
    events = list(stream)
    assert events[0].type == "response.created"
    assert "response.completed" not in [event.type for event in events]
    last = events[-1]
    assert last.type == "error" and last.code == "upstream_error"
    assert "interrupted" in last.message or "closed" in last.message


def test_a_growing_session_of_large_bodies_reaches_the_upstream_as_sent(
    sim: Simulator, proxy: ProxyServer
) -> None:
    """The SDK writes compact JSON, so each request after the first is read as the one before
    with items added, its last turn regrouped: what the upstream receives is still exactly
    the items sent, and a bad item added to a body read before is refused before any call."""
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    items: list[Any] = [{"role": "developer", "content": "Follow the rules. " * 2400}]
    for step in range(3):
        items.append({"role": "user", "content": f"step {step} é"})
        sdk.responses.create(model=MODEL, input=items, instructions="Be brief.")
        sent = [r for r in sim.received if r.path == "/v1/responses"][-1]
        assert sent.body["input"] == items and len(sent.raw) > 40_000
        call = {"type": "function_call", "call_id": f"c{step}", "name": "shell", "arguments": "{}"}
        items += [call, {"type": "function_call_output", "call_id": f"c{step}", "output": "ok"}]
    calls = len(sim.received)
    with pytest.raises(openai.BadRequestError, match=rf"input\[{len(items)}\]"):
        sdk.responses.create(model=MODEL, input=[*items, 7], instructions="Be brief.")
    assert len(sim.received) == calls
