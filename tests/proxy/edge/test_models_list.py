"""`GET /v1/models`: the upstreams' lists merged; an upstream that fails is named, and when every
one fails the client gets a 502 in the error envelope, not an empty list."""

from __future__ import annotations

import socket
from typing import Any

import openai
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings(sim: Simulator, db_path: str, *names: str) -> Any:
    """Upstreams in order: "sim" is the simulator, "lost" a path of it that answers 404, any
    other name a port nobody listens on."""
    urls = {"sim": sim.base_url, "lost": sim.base_url + "/nowhere"}
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    upstreams = {
        name: {"base_url": urls.get(name, dead), "api_key": "k", "timeout_s": 5} for name in names
    }
    models = [{"match": "*", "upstream": names[0]}, {"match": "pinned-model", "upstream": names[0]}]
    return settings_for(sim.base_url, db_path, upstreams=upstreams, models=models)


def sdk(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)


def test_every_upstream_unreachable_is_a_502(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path, "down")) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(proxy).models.list()
    assert caught.value.status_code == 502
    error: Any = caught.value.body
    assert error["type"] == "upstream_error"
    assert error["code"] == "models_unavailable"
    assert "down" in error["message"]


def test_an_upstream_error_status_counts_as_failed(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path, "lost")) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(proxy).models.list()
    assert caught.value.status_code == 502
    assert "lost (answered 404)" in caught.value.message


def test_the_failing_upstreams_are_named_beside_the_others_models(
    sim: Simulator, db_path: str
) -> None:
    with ProxyServer(settings(sim, db_path, "sim", "down")) as proxy:
        answer = sdk(proxy).models.with_raw_response.list()
    ids = {model.id for model in answer.parse().data}
    assert "gpt-4o-mini" in ids  # the simulator's
    assert "pinned-model" in ids  # the config's
    assert answer.status_code == 200
    assert answer.headers["x-ctxgate-error"].startswith("model list failed: down (")


def test_no_error_header_when_every_upstream_answers(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path, "sim")) as proxy:
        answer = sdk(proxy).models.with_raw_response.list()
    assert answer.status_code == 200
    assert "x-ctxgate-error" not in answer.headers
    assert answer.parse().data
