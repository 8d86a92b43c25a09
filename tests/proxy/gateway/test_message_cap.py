"""`server.max_messages`: a request with more messages than the cap is refused with 413 in its
API's own error envelope, at once and without reaching the upstream; 0 turns the cap off."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

CAP = 999  # odd: a history that starts and ends with the user's turn


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    settings = settings_for(
        sim.base_url,
        db_path,
        server={"max_messages": CAP},
        upstreams={
            "sim": {"base_url": sim.base_url, "apis": ["chat", "responses", "messages"]},
            "gem": {"base_url": sim.gemini_url, "apis": ["gemini"]},
        },
        models=[
            {"match": "gemini-*", "upstream": "gem", "context_length": 128000},
            {"match": "*", "upstream": "sim", "context_length": 128000},
        ],
    )
    with ProxyServer(settings) as server:
        yield server


def _origin(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def _chat(n: int) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": f"w{i}"} for i in range(n)]
    return "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": messages}


def _responses(n: int) -> tuple[str, dict[str, Any]]:
    items = [{"role": "user", "content": f"w{i}"} for i in range(n)]
    return "/v1/responses", {"model": "gpt-4o-mini", "input": items}


def _messages(n: int) -> tuple[str, dict[str, Any]]:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"w{i}"} for i in range(n)]
    return "/v1/messages", {"model": "claude-sonnet-4", "max_tokens": 16, "messages": turns}


def _gemini(n: int) -> tuple[str, dict[str, Any]]:
    contents = [
        {"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"w{i}"}]} for i in range(n)
    ]
    return "/v1beta/models/gemini-2.5-flash:generateContent", {"contents": contents}


def _envelope(api: str, body: dict[str, Any]) -> str:
    """The refusal's message, read the way each API's SDK reads its errors."""
    if api == "messages":
        assert body["type"] == "error"
        assert body["error"]["type"] == "request_too_large"
        return str(body["error"]["message"])
    if api == "gemini":
        assert body["error"]["code"] == 413
        return str(body["error"]["message"])
    assert body["error"]["code"] == "request_too_large"
    return str(body["error"]["message"])


@pytest.mark.parametrize(
    ("api", "build"),
    [("chat", _chat), ("responses", _responses), ("messages", _messages), ("gemini", _gemini)],
)
def test_more_messages_than_the_cap_are_refused_in_the_apis_envelope(
    sim: Simulator, proxy: ProxyServer, api: str, build: Any
) -> None:
    path, body = build(CAP + 2)
    headers = {"authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01"}
    calls = len(sim.received)
    started = time.perf_counter()
    response = httpx.post(_origin(proxy) + path, json=body, headers=headers, timeout=30)
    elapsed = time.perf_counter() - started
    assert response.status_code == 413, response.text
    assert "over the 999 this server accepts (server.max_messages)" in _envelope(
        api, response.json()
    )
    assert len(sim.received) == calls  # never forwarded
    assert elapsed < 5  # a refusal, not a stall (the bench measures the real figure)
    path, body = build(CAP)
    accepted = httpx.post(_origin(proxy) + path, json=body, headers=headers, timeout=30)
    assert accepted.is_success, accepted.text


def test_chat_refuses_past_the_cap_before_checking_a_message(
    sim: Simulator, proxy: ProxyServer
) -> None:
    # Its messages are the body's array: counted as soon as it is parsed, so even a malformed
    # message past the cap is never looked at (nor the body kept for the next request).
    path, body = _chat(CAP + 2)
    body["messages"][-1] = {"role": "robot", "content": 7}
    headers = {"authorization": "Bearer k"}
    response = httpx.post(_origin(proxy) + path, json=body, headers=headers, timeout=30)
    assert response.status_code == 413, response.text
    assert "holds 1,001 messages" in _envelope("chat", response.json())
    path, body = _chat(CAP)
    body["messages"][-1] = {"role": "robot", "content": 7}
    malformed = httpx.post(_origin(proxy) + path, json=body, headers=headers, timeout=30)
    assert malformed.status_code == 400, malformed.text
