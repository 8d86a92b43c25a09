"""Inputs a hostile or careless caller sends: odd header bytes, odd session ids, credentials in
every header a provider accepts. Each is answered (relayed or refused with a 4xx), never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

MESSAGES = [{"role": "user", "content": "Say hello."}]
CHAT = {"model": "gpt-4o-mini", "messages": MESSAGES}


proxy = proxy_fixture()


def post_chat(proxy: ProxyServer, body: dict[str, Any], headers: Any = None) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", json=body, headers=headers, timeout=10)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-title", "café ☕".encode()),
        ("user-agent", "agent/1.0 (Zürich; 東京)".encode()),
        ("openai-organization", "org-ünïcode".encode()),
        ("x-latin1", b"caf\xe9"),  # not UTF-8: a byte is a byte
    ],
)
def test_non_ascii_header_bytes_reach_the_provider_unchanged(
    sim: Simulator, proxy: ProxyServer, name: str, value: bytes
) -> None:
    response = post_chat(proxy, CHAT, headers=[(name.encode(), value)])
    assert response.status_code == 200, response.text
    received = sim.chat_requests[-1].headers[name]
    assert received.encode("latin-1") == value


def test_non_ascii_header_on_a_streamed_request(sim: Simulator, proxy: ProxyServer) -> None:
    with httpx.stream(
        "POST",
        proxy.base_url + "/chat/completions",
        json={**CHAT, "stream": True},
        headers=[(b"x-title", "naïve".encode())],
        timeout=10,
    ) as response:
        text = response.read().decode()
    assert response.status_code == 200
    assert "[DONE]" in text
    assert sim.chat_requests[-1].headers["x-title"].encode("latin-1") == "naïve".encode()


BAD_IDS = ["abc\r\nx-evil: 1", "abc\ndef", "nul\x00byte", "tab\there", "del\x7f", "c1\x85c1"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_body_session_id_with_control_characters_is_refused_before_the_provider(
    sim: Simulator, proxy: ProxyServer, bad: str
) -> None:
    response = post_chat(proxy, {**CHAT, "metadata": {"session_id": bad}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_session_id"
    assert "metadata.session_id" in error["message"]
    assert sim.chat_requests == []  # the provider was never called (nor billed)


@pytest.mark.parametrize("bad", [b"tab\there", b"del\x7fx"])
def test_header_session_id_with_control_characters_is_refused(
    sim: Simulator, proxy: ProxyServer, bad: bytes
) -> None:
    try:
        response = post_chat(proxy, CHAT, headers=[(b"x-session-id", bad)])
    except httpx.LocalProtocolError:
        pytest.skip("the HTTP client itself refuses to send this header")
    assert response.status_code in (400, 422), response.text
    if response.status_code == 400 and response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        assert response.json()["error"]["code"] == "invalid_session_id"
    assert sim.chat_requests == []


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("会话-1", "%E4%BC%9A%E8%AF%9D-1"),
        ("café", "caf%C3%A9"),
        ("100%-ünïque", "100%25-%C3%BCn%C3%AFque"),
        ("plain-ascii id", "plain-ascii id"),
    ],
)
def test_non_ascii_session_ids_are_encoded_alike_from_body_and_header(
    sim: Simulator, proxy: ProxyServer, given: str, canonical: str
) -> None:
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"metadata": {"session_id": given}}
    )
    assert raw.headers["x-session-id"] == canonical
    assert raw.parse().choices[0].message.content
    by_header = post_chat(
        proxy,
        CHAT,
        headers=[(b"authorization", b"Bearer sk-client"), (b"x-session-id", given.encode())],
    )
    assert by_header.status_code == 200
    assert by_header.headers["x-session-id"] == canonical
    assert len(sim.chat_requests) == 2


def test_manual_compress_finds_an_encoded_session_by_its_decoded_path(
    proxy: ProxyServer,
) -> None:
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
    sdk.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, extra_body={"metadata": {"session_id": "café"}}
    )
    response = httpx.post(
        proxy.base_url + "/sessions/caf%C3%A9/compress",
        headers={"authorization": "Bearer sk-client"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.json()["session_id"] == "caf%C3%A9"


@pytest.mark.parametrize("header", ["x-api-key", "api-key"])
def test_client_key_header_reaches_an_upstream_without_a_key(
    sim: Simulator, db_path: str, header: str
) -> None:
    with ProxyServer(settings_for(sim.base_url, db_path, api_key=None)) as server:
        response = post_chat(server, CHAT, headers={header: "sk-client-secret"})
    assert response.status_code == 200
    assert sim.chat_requests[-1].headers[header] == "sk-client-secret"


@pytest.mark.parametrize("header", ["x-api-key", "api-key"])
def test_client_key_header_never_reaches_an_upstream_with_its_own_key(
    sim: Simulator, proxy: ProxyServer, header: str
) -> None:
    response = post_chat(proxy, CHAT, headers={header: "sk-client-secret"})
    assert response.status_code == 200
    received = sim.chat_requests[-1].headers
    assert header not in received
    assert received["authorization"] == "Bearer sk-upstream-test"


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize("levels", [200, 300])
def test_json_nested_deeper_than_ctxgate_writes_back_is_refused_with_a_400(
    sim: Simulator, proxy: ProxyServer, levels: int
) -> None:
    """orjson reads 1,024 levels but writes 255: a body between the two is the client's
    mistake (a 400 naming the limit, the provider never called), one within both is served.
    The session id is derived from the first user message, which is written back to hash it."""
    part = {"type": "text", "text": "Say hello.", "extra": deep(levels)}
    before = len(sim.chat_requests)
    response = post_chat(proxy, {**CHAT, "messages": [{"role": "user", "content": [part]}]})
    if levels < 250:
        assert response.status_code == 200, response.text
        assert len(sim.chat_requests) == before + 1
        return
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "nested deeper than ctxgate can re-serialise (255 levels)" in error["message"]
    assert len(sim.chat_requests) == before
