"""Malformed Gemini inputs, for real: one keep-alive httpx client -> ctxgate -> the simulator.

Every case is the client's mistake (a key no header can carry, a path without a model, tools,
declarations, calls or contents of the wrong shape). Each must be answered with a 400 in
Google's envelope, never a 5xx, without the provider being called for a generation, and on
the same connection as the one before it (a 500 raised outside the app, or an answer sent
while the body is unread, would close it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

MODEL = "gemini-sim"
CONTENTS = [{"role": "user", "parts": [{"text": "Say hello."}]}]
GOOD = {"contents": CONTENTS}
ACTIONS = ("generateContent", "streamGenerateContent?alt=sse", "countTokens")

BAD_KEYS = [
    "caf€",
    "東京",
    "key-🙂",
    "ﬁ",
    "abc\r\nx-evil: 1",
    "abc\ndef",
    "abc\rdef",
    "nul\x00byte",
    "tab\there",
    "sp ace",
    "del\x7f",
    "c1\x85c1",
    "é",  # latin-1, but no header of Google's takes it
]
# (A DEL or a control character other than tab in a header never reaches ctxgate: uvicorn's
# HTTP parser refuses the request itself.)
BAD_HEADER_KEYS = [b"caf\xe9", b"\x80\x81", b"tab\there", b"sp ace", b"\xff"]


def _call(name: object = "shell", **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, **extra}}


def _answer(name: object = "shell", **extra: Any) -> dict[str, Any]:
    return {"functionResponse": {"name": name, **extra}}


def _with_parts(*parts: Any) -> dict[str, Any]:
    return {"contents": [*CONTENTS, {"role": "model", "parts": list(parts)}]}


def _declaring(*declarations: Any) -> dict[str, Any]:
    return {**GOOD, "tools": [{"functionDeclarations": list(declarations)}]}


BAD_BODIES: list[Any] = [
    # tools
    {**GOOD, "tools": "shell"},
    {**GOOD, "tools": {"functionDeclarations": []}},
    {**GOOD, "tools": [1]},
    {**GOOD, "tools": [[]]},
    {**GOOD, "tools": [None]},
    {**GOOD, "tools": [{"functionDeclarations": "shell"}]},
    {**GOOD, "tools": [{"functionDeclarations": {"name": "shell"}}]},
    # function declarations
    _declaring(1),
    _declaring("shell"),
    _declaring({}),
    _declaring({"name": ""}),
    _declaring({"name": 5}),
    _declaring({"name": None}),
    _declaring({"name": "has space"}),
    _declaring({"name": "x" * 200}),
    _declaring({"name": "shell", "description": 3}),
    _declaring({"name": "shell", "parameters": "object"}),
    _declaring({"name": "shell", "parameters": []}),
    _declaring({"name": "shell", "parametersJsonSchema": "object"}),
    _declaring({"name": "shell", "parametersJsonSchema": 1}),
    # function calls and responses in contents
    _with_parts({"functionCall": "shell"}),
    _with_parts({"functionCall": []}),
    _with_parts({"functionCall": None}),
    _with_parts({"functionCall": {}}),
    _with_parts(_call(name=5)),
    _with_parts(_call(name="")),
    _with_parts(_call(name="bad name")),
    _with_parts(_call(args="ls")),
    _with_parts(_call(args=["ls"])),
    _with_parts(_call(args=1)),
    _with_parts(_call(id=7)),
    {"contents": [*CONTENTS, {"role": "user", "parts": [{"functionResponse": "ok"}]}]},
    {"contents": [*CONTENTS, {"role": "user", "parts": [_answer(name=None)]}]},
    {"contents": [*CONTENTS, {"role": "user", "parts": [_answer(response="ok")]}]},
    {"contents": [*CONTENTS, {"role": "user", "parts": [_answer(response=[1])]}]},
    # contents
    {},
    {"contents": "hello"},
    {"contents": {"role": "user"}},
    {"contents": [1]},
    {"contents": ["hello"]},
    {"contents": [{"role": "user", "parts": "hello"}]},
    {"contents": [{"role": "user", "parts": [1]}]},
    {"contents": [{"role": "user", "parts": ["hello"]}]},
    {"contents": [{"role": "user"}]},
    {"contents": [{"role": "bot", "parts": [{"text": "hi"}]}]},
    {"contents": [{"role": "user", "parts": [{"text": 5}]}]},
    {"contents": [{"role": "user", "parts": [{"text": ["a"]}]}]},
    {**GOOD, "systemInstruction": 5},
    {**GOOD, "systemInstruction": {"parts": "be brief"}},
    {**GOOD, "systemInstruction": {"parts": [{"text": 1}]}},
    {**GOOD, "generationConfig": "fast"},
    {**GOOD, "generationConfig": {"maxOutputTokens": "many"}},
    {**GOOD, "generationConfig": {"maxOutputTokens": 0}},
    [],
    "hello",
    None,
]
RAW_BODIES = [b"{", b"not json", b""]


def _cases() -> Iterator[tuple[str, str, dict[str, str], bytes | None, Any]]:
    """(label, path, query, key header, body) for every malformed request."""
    for k, key in enumerate(BAD_KEYS):
        for action in ACTIONS:
            yield f"key{k}-{action}", f"models/{MODEL}:{action}", {"key": key}, None, GOOD
        yield f"key{k}-list", "models", {"key": key}, None, None
    for k, raw in enumerate(BAD_HEADER_KEYS):
        for action in ACTIONS[:2]:
            yield f"header{k}-{action}", f"models/{MODEL}:{action}", {}, raw, GOOD
    for action in ACTIONS:
        yield f"nomodel-{action}", f"models/:{action}", {}, None, GOOD
    for k, body in enumerate(BAD_BODIES):
        for action in ACTIONS[:2]:
            yield f"body{k}-{action}", f"models/{MODEL}:{action}", {}, None, body
    for k, raw in enumerate(RAW_BODIES):
        yield f"raw{k}", f"models/{MODEL}:generateContent", {}, None, raw


CASES = list(_cases())


@pytest.fixture
def gemini_sim() -> Iterator[Simulator]:
    with Simulator(models={MODEL: ModelSpec(window=1_000_000)}) as simulator:
        yield simulator


@pytest.fixture
def proxy(gemini_sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    url = gemini_sim.gemini_url
    settings = settings_for(
        url,
        db_path,
        api_key=None,
        upstreams={"sim": {"base_url": url, "apis": ["gemini"]}},
    )
    with ProxyServer(settings) as server:
        yield server


def _send(client: httpx.Client, case: tuple[Any, ...]) -> httpx.Response:
    _label, path, params, header, body = case
    headers = {"x-goog-api-key": header} if header is not None else {}
    url = f"/v1beta/{path}"
    if params:
        url += ("&" if "?" in path else "?") + "key=" + quote(params["key"], safe="")
    if isinstance(body, bytes):
        return client.post(url, content=body, headers=headers)
    if body is None and path == "models":
        return client.get(url, headers=headers)
    return client.post(url, json=body, headers=headers)


def _local_port(response: httpx.Response) -> int:
    stream = response.extensions["network_stream"]
    port: int = stream.get_extra_info("client_addr")[1]
    return port


def test_malformed_gemini_inputs_get_googles_400_on_one_kept_connection(
    gemini_sim: Simulator, proxy: ProxyServer
) -> None:
    assert len(CASES) >= 100
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    root = f"http://127.0.0.1:{proxy.port}"
    with httpx.Client(base_url=root, limits=limits, timeout=10) as client:
        ports = set()
        for case in CASES:
            response = _send(client, case)
            ports.add(_local_port(response))
            assert response.status_code == 400, (case[0], response.status_code, response.text)
            error = response.json()["error"]
            assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT", case[0]
            assert isinstance(error["message"], str) and error["message"], case[0]
        # and the connection still serves a good request
        good = client.post(f"/v1beta/models/{MODEL}:generateContent", json=GOOD)
        assert good.status_code == 200, good.text
        ports.add(_local_port(good))
    assert len(ports) == 1, f"the connection was replaced {len(ports) - 1} times"
    generations = [r for r in gemini_sim.gemini_requests if "countTokens" not in r.path]
    assert len(generations) == 1  # the good one only: nothing malformed went upstream


def test_a_valid_query_key_still_reaches_the_provider_as_googles_header(
    gemini_sim: Simulator, proxy: ProxyServer
) -> None:
    root = f"http://127.0.0.1:{proxy.port}"
    response = httpx.post(
        f"{root}/v1beta/models/{MODEL}:generateContent?key=AIza-good_key", json=GOOD
    )
    assert response.status_code == 200, response.text
    received = gemini_sim.gemini_requests[-1]
    assert received.headers["x-goog-api-key"] == "AIza-good_key"
    assert "key=" not in received.path
