"""Every call an SDK makes works through ctxgate: what ctxgate does not serve itself is relayed
to the upstream untouched (request and answer), routed by the model where there is one."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import openai
import pytest

from proxy.config_file import parse_settings
from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

proxy = proxy_fixture(server={"max_body_bytes": 256 * 1024})


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-client", max_retries=0)


def without_ids(data: Any) -> Any:
    return {k: v for k, v in data.model_dump().items() if k not in ("id", "created")}


def test_embeddings_through_ctxgate_match_a_direct_call(sim: Simulator, proxy: ProxyServer) -> None:
    direct = sdk(sim.base_url).embeddings.create(model="emb-1", input=["alpha", "beta"])
    via = sdk(proxy.base_url).embeddings.create(model="emb-1", input=["alpha", "beta"])
    assert via.model_dump() == direct.model_dump()
    first, second = sim.received[-2:]
    assert (second.path, second.method) == ("/v1/embeddings", "POST")
    assert second.raw == first.raw  # the body went as the client sent it
    assert second.headers["authorization"] == "Bearer sk-upstream-test"
    assert not any(name.startswith("x-stainless") for name in second.headers)


def test_text_completions_plain_and_streamed(sim: Simulator, proxy: ProxyServer) -> None:
    direct = sdk(sim.base_url).completions.create(model="gpt-3.5-turbo-instruct", prompt="Hi")
    via = sdk(proxy.base_url).completions.create(model="gpt-3.5-turbo-instruct", prompt="Hi")
    assert via.model_dump() == direct.model_dump()
    streamed = sdk(proxy.base_url).completions.create(
        model="gpt-3.5-turbo-instruct", prompt="Hi there", stream=True
    )
    text = "".join(chunk.choices[0].text for chunk in streamed)
    assert text.strip() == "completed: Hi there"


def test_models_retrieve_goes_upstream(sim: Simulator, proxy: ProxyServer) -> None:
    via = sdk(proxy.base_url).models.retrieve("small-8k")
    assert via.id == "small-8k"
    assert sim.received[-1].path == "/v1/models/small-8k"
    with pytest.raises(openai.NotFoundError) as caught:
        sdk(proxy.base_url).models.retrieve("no-such-model")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_a_file_upload_streams_through_beyond_the_buffered_body_limit(
    sim: Simulator, proxy: ProxyServer
) -> None:
    content = bytes(range(256)) * 4096  # 1 MiB: four times server.max_body_bytes
    uploaded = sdk(proxy.base_url).files.create(
        file=("train.jsonl", io.BytesIO(content)), purpose="fine-tune"
    )
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (
        len(content),
        "train.jsonl",
        "fine-tune",
    )
    received = sim.received[-1]
    assert received.path == "/v1/files"
    assert content in received.raw
    assert received.headers["content-type"].startswith("multipart/form-data")


def test_audio_transcription(sim: Simulator, proxy: ProxyServer) -> None:
    audio = b"RIFF" + b"\x00" * 2000
    answer = sdk(proxy.base_url).audio.transcriptions.create(
        model="whisper-1", file=("clip.wav", io.BytesIO(audio))
    )
    assert answer.text == f"{len(audio)} bytes of clip.wav in whisper-1"


def test_any_other_method_and_path_is_relayed_with_status_and_query(
    sim: Simulator, proxy: ProxyServer
) -> None:
    response = httpx.put(
        proxy.base_url + "/vector_stores/vs_1?limit=3", json={"name": "x"}, timeout=10
    )
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Unknown request URL: PUT /v1/vector_stores/vs_1."
    assert sim.received[-1].raw == b'{"name":"x"}' or json.loads(sim.received[-1].raw) == {
        "name": "x"
    }
    deleted = httpx.delete(proxy.base_url + "/files/file-1", timeout=10)
    assert deleted.status_code == 404 and sim.received[-1].method == "DELETE"


def test_ctxgate_routes_still_win(sim: Simulator, proxy: ProxyServer) -> None:
    client = sdk(proxy.base_url)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert "x-session-id" in raw.headers  # served by ctxgate, not relayed
    listed = {model.id for model in client.models.list()}
    assert {"small-8k", "gpt-4o-mini"} <= listed
    compress = httpx.post(proxy.base_url + "/sessions/none/compress", timeout=10)
    assert compress.json()["error"]["code"] == "session_not_found"  # ctxgate's own answer


@pytest.mark.parametrize("raw_path", [b"/v1/files/%2e%2e/%2E%2E/admin", b"/v1/files/%2e/x"])
def test_dot_segments_are_refused(sim: Simulator, proxy: ProxyServer, raw_path: bytes) -> None:
    with httpx.Client() as client:
        request = client.build_request("GET", proxy.base_url + "/x")
        request.url = request.url.copy_with(raw_path=raw_path)
        response = client.send(request)
    assert response.status_code == 400
    assert sim.received == []


def test_routed_by_the_body_model_else_to_the_first_upstream(db_path: str) -> None:
    with Simulator() as first, Simulator() as second:
        settings = parse_settings(
            {
                "upstreams": {
                    "a": {"base_url": first.base_url, "api_key": "sk-a"},
                    "b": {"base_url": second.base_url, "api_key": "sk-b"},
                },
                "models": [
                    {"match": "emb-b*", "upstream": "b"},
                    {"match": "*", "upstream": "a"},
                ],
                "storage": {"url": f"sqlite+aiosqlite:///{db_path}"},
                "logging": {"json": False, "level": "warning"},
            },
            {},
        )
        with ProxyServer(settings) as proxy:
            client = sdk(proxy.base_url)
            client.embeddings.create(model="emb-b-large", input="x")
            client.embeddings.create(model="emb-a", input="x")
            httpx.get(proxy.base_url + "/files", timeout=10)  # no model: the first upstream
        assert [(r.path, r.headers["authorization"]) for r in second.received] == [
            ("/v1/embeddings", "Bearer sk-b")
        ]
        assert [r.path for r in first.received] == ["/v1/embeddings", "/v1/files"]


def test_keys_are_enforced_on_relayed_calls(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path, auth={"keys": ["sk-team"]})
    with ProxyServer(settings) as proxy:
        with pytest.raises(openai.AuthenticationError):
            sdk(proxy.base_url).embeddings.create(model="emb-1", input="x")
        assert sim.received == []
        team = openai.OpenAI(base_url=proxy.base_url, api_key="sk-team", max_retries=0)
        team.embeddings.create(model="emb-1", input="x")
    assert sim.received[-1].headers["authorization"] == "Bearer sk-upstream-test"
