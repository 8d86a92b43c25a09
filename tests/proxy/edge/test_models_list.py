"""`GET /v1/models`: the lists of the upstreams serving OpenAI's APIs merged with the models the
config names; an upstream that fails is named, and when nothing can be listed the client gets a
502 in the error envelope, not an empty list."""

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


def settings(sim: Simulator, db_path: str, *names: str, pinned: bool = True) -> Any:
    """Upstreams in order: "sim" is the simulator, "lost" a path of it that answers 404, any
    other name a port nobody listens on. `pinned`: the config also names `pinned-model`."""
    urls = {"sim": sim.base_url, "lost": sim.base_url + "/nowhere"}
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    upstreams = {
        name: {"base_url": urls.get(name, dead), "api_key": "k", "timeout_s": 5} for name in names
    }
    models = [{"match": "*", "upstream": names[0]}]
    if pinned:
        models.append({"match": "pinned-model", "upstream": names[0]})
    return settings_for(sim.base_url, db_path, upstreams=upstreams, models=models)


def model_list_calls(sim: Simulator) -> list[str]:
    return [r.path for r in sim.received if r.path.rstrip("/").endswith("models")]


def sdk(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)


def test_every_upstream_unreachable_is_a_502(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path, "down", pinned=False)) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(proxy).models.list()
    assert caught.value.status_code == 502
    error: Any = caught.value.body
    assert error["type"] == "upstream_error"
    assert error["code"] == "models_unavailable"
    assert "down" in error["message"]


def test_an_upstream_error_status_counts_as_failed(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path, "lost", pinned=False)) as proxy:
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


def test_the_configs_models_are_listed_when_every_upstream_fails(
    sim: Simulator, db_path: str
) -> None:
    with ProxyServer(settings(sim, db_path, "down")) as proxy:
        answer = sdk(proxy).models.with_raw_response.list()
    assert answer.status_code == 200
    assert [model.id for model in answer.parse().data] == ["pinned-model"]
    assert answer.headers["x-ctxgate-error"].startswith("model list failed: down (")


def test_a_gemini_only_config_lists_its_named_models(sim: Simulator, db_path: str) -> None:
    upstreams = {"gem": {"base_url": sim.url + "/v1beta", "api_key": "k", "apis": ["gemini"]}}
    models = [{"match": "gemini-2.5-pro", "upstream": "gem"}, {"match": "*", "upstream": "gem"}]
    config = settings_for(sim.base_url, db_path, upstreams=upstreams, models=models)
    with ProxyServer(config) as proxy:
        answer = sdk(proxy).models.with_raw_response.list()
    assert answer.status_code == 200
    assert [model.id for model in answer.parse().data] == ["gemini-2.5-pro"]
    assert "x-ctxgate-error" not in answer.headers
    assert model_list_calls(sim) == []  # Gemini's `/models` is not OpenAI's list


def test_upstreams_of_other_apis_are_not_asked_nor_named_as_failing(
    sim: Simulator, db_path: str
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    upstreams = {
        "openai": {"base_url": sim.base_url, "api_key": "k"},
        "anthropic": {"base_url": dead, "api_key": "k", "apis": ["messages"]},
        "gemini": {"base_url": dead + "/v1beta", "api_key": "k", "apis": ["gemini"]},
    }
    models = [{"match": "*", "upstream": "openai"}]
    config = settings_for(sim.base_url, db_path, upstreams=upstreams, models=models)
    with ProxyServer(config) as proxy:
        answer = sdk(proxy).models.with_raw_response.list()
    assert answer.status_code == 200
    assert "gpt-4o-mini" in {model.id for model in answer.parse().data}
    assert "x-ctxgate-error" not in answer.headers
    assert model_list_calls(sim) == ["/v1/models"]


def test_nothing_to_list_is_a_502(sim: Simulator, db_path: str) -> None:
    upstreams = {"gem": {"base_url": sim.url + "/v1beta", "api_key": "k", "apis": ["gemini"]}}
    models = [{"match": "gemini-*", "upstream": "gem"}]
    config = settings_for(sim.base_url, db_path, upstreams=upstreams, models=models)
    with ProxyServer(config) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(proxy).models.list()
    assert caught.value.status_code == 502
    assert "no upstream serves the chat or responses API" in caught.value.message
