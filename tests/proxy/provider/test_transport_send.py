"""`AiohttpTransport.send`: an upstream call sent from its parts puts on the wire what the
httpx request built of the same parts does, byte for byte (its Host and Content-Length
included), or declines so that the request is built after all."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.provider.transport import AiohttpTransport, new_http_transport
from proxy.provider.upstream import Upstream
from session.config.settings import UpstreamSettings
from session.ports.headers import wire_headers
from tests.proxy.provider.test_transport import RawServer, Received

TIMEOUT: dict[str, float | None] = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
CLIENT_UTF8 = "café".encode().decode("latin-1")  # a client's UTF-8 bytes, as ctxgate reads them
CLIENT_LATIN1 = b"caf\xe9".decode("latin-1")  # not UTF-8: aiohttp cannot send these bytes


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    raw = RawServer()
    await raw.start()
    yield raw
    await raw.stop()


@pytest.fixture
async def transport() -> AsyncIterator[AiohttpTransport]:
    http = new_http_transport("aiohttp")
    assert isinstance(http, AiohttpTransport)
    yield http
    await http.aclose()


async def _read(response: httpx.Response) -> bytes:
    try:
        return await response.aread()
    finally:
        await response.aclose()


def _wire(received: Received) -> tuple[bytes, bytes]:
    return received.head, received.body


@pytest.mark.parametrize(
    ("method", "body", "headers"),
    [
        ("POST", b'{"model":"m"}', {"content-type": "application/json", "x-title": CLIENT_UTF8}),
        ("POST", b"x" * 70_000, {"authorization": "Bearer sk-1", "x-mark": "✓ config"}),
        ("GET", b"", {"accept": "application/json"}),
        ("POST", b"{}", {"host": "example.test", "content-type": "application/json"}),
    ],
    ids=["utf8-value", "large-body-config-value", "bodiless-get", "own-host"],
)
async def test_sent_from_parts_as_the_built_request_is(
    server: RawServer,
    transport: AiohttpTransport,
    method: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    url = httpx.URL(server.url)
    sent = await transport.send(method, url, headers, body, TIMEOUT)
    assert sent is not None and await _read(sent) == b"ok"
    built = httpx.Request(
        method,
        url,
        content=body or None,
        headers=wire_headers(headers),
        extensions={"timeout": TIMEOUT},
    )
    assert await _read(await transport.handle_async_request(built)) == b"ok"
    from_parts, from_request = server.requests
    assert _wire(from_parts) == _wire(from_request)


async def test_parts_it_cannot_send_exactly_are_declined(transport: AiohttpTransport) -> None:
    url = httpx.URL("http://127.0.0.1:9/v1/x")  # never reached
    assert await transport.send("POST", url, {"x-title": CLIENT_LATIN1}, b"{}", TIMEOUT) is None
    # httpx gives a bodiless POST `Content-Length: 0`, which only its own transport sends.
    assert await transport.send("POST", url, {}, b"", TIMEOUT) is None


async def test_an_upstream_call_through_aiohttp_sends_what_httpx_would(
    server: RawServer, transport: AiohttpTransport
) -> None:
    """The same call through ctxgate's transport and through httpx's own: the same bytes."""
    base = server.url.removesuffix("/x")
    settings = UpstreamSettings(name="up", base_url=base, api_key="sk-up")
    headers = {"content-type": "application/json", "x-title": CLIENT_UTF8}
    plain = new_http_transport("httpx")
    try:
        for http in (transport, plain):
            answer = await Upstream(settings, http).call("POST", "/x", b'{"a":1}', headers)
            assert answer.status_code == 200 and answer.content == b"ok"
            async with Upstream(settings, http).open_stream("/x", b'{"s":1}', headers) as streamed:
                assert await streamed.aread() == b"ok"
    finally:
        await plain.aclose()
    ours, ours_stream, theirs, theirs_stream = server.requests
    assert ours.body == theirs.body and ours_stream.body == theirs_stream.body
    # httpx's own transport orders its framing headers itself: compare them as sets.
    assert sorted(ours.headers) == sorted(theirs.headers)
    assert sorted(ours_stream.headers) == sorted(theirs_stream.headers)
