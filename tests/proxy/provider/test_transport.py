"""proxy/provider/transport.py against a raw HTTP/1.1 server on loopback: the aiohttp transport and
httpx's own put the same bytes on the wire, hand back the same answers and raise the same
httpx errors. Every test runs once per transport."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest

from proxy.provider.transport import AiohttpTransport, new_http_transport

# A scripted answer is a list of steps: bytes are written, a float is a pause, an Event is
# waited for, None closes the connection.
Step = bytes | float | asyncio.Event | None


class UploadBroke(Exception):
    """What a client's request body raises halfway through."""


@dataclass
class Received:
    head: bytes  # request line and header block, as on the wire
    body: bytes = b""  # as on the wire (chunk framing included)
    content: bytes = b""  # the body without chunk framing

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        lines = self.head.split(b"\r\n")[1:]
        pairs = [line.split(b":", 1) for line in lines if line]
        return [(name.decode("ascii").lower(), value.strip()) for name, value in pairs]

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


async def read_request(reader: asyncio.StreamReader) -> Received:
    received = Received(await reader.readuntil(b"\r\n\r\n"))
    if received.header("transfer-encoding") != b"chunked":
        length = int(received.header("content-length") or b"0")
        received.body = received.content = await reader.readexactly(length)
        return received
    while True:
        size_line = await reader.readuntil(b"\r\n")
        data = await reader.readexactly(int(size_line.split(b";")[0], 16) + 2)
        received.body += size_line + data
        received.content += data[:-2]
        if data == b"\r\n":  # the last chunk
            return received


def answer(status: str = "200 OK", *headers: str, body: bytes = b"ok") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class RawServer:
    """Records each request's bytes and answers with the next scripted reply (200 "ok" when
    none is left); counts accepted connections."""

    def __init__(self) -> None:
        self.replies: deque[list[Step]] = deque()
        self.requests: list[Received] = []
        self.connections = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/x"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    self.requests.append(await read_request(reader))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client went away
                for step in self.replies.popleft() if self.replies else [answer()]:
                    if step is None:
                        return
                    if isinstance(step, bytes):
                        writer.write(step)
                        await writer.drain()
                    elif isinstance(step, asyncio.Event):
                        await step.wait()
                    else:
                        await asyncio.sleep(step)
        finally:
            writer.close()
            self._tasks.discard(task)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    raw = RawServer()
    await raw.start()
    yield raw
    await raw.stop()


@pytest.fixture(params=["aiohttp", "httpx"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncBaseTransport]:
    http = new_http_transport(request.param)
    assert isinstance(http, AiohttpTransport) == (request.param == "aiohttp")
    yield http
    await http.aclose()


def build(method: str, url: str, read: float = 5.0, **kwargs: Any) -> httpx.Request:
    timeout = {"connect": 5.0, "read": read, "write": 5.0, "pool": 5.0}
    return httpx.Request(method, url, extensions={"timeout": timeout}, **kwargs)


async def fetch(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    response = await transport.handle_async_request(request)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


def assert_sent_exactly(received: Received, request: httpx.Request) -> None:
    """The server got the request's headers, byte for byte and in order, and nothing else."""
    assert received.headers == [(k.decode("ascii").lower(), v) for k, v in request.headers.raw]
    assert received.head.startswith(f"{request.method} {request.url.raw_path.decode()} ".encode())


@pytest.mark.parametrize("title", ["café".encode(), b"caf\xe9"], ids=["utf8", "latin1"])
async def test_headers_go_out_exactly(
    server: RawServer, transport: httpx.AsyncBaseTransport, title: bytes
) -> None:
    request = build(
        "GET",
        server.url,
        headers=[(b"x-title", title), (b"Authorization", b"Bearer sk-1"), (b"x-tag", b"a")]
        + [(b"x-tag", b"b")],  # a repeated header goes out twice
    )
    reply = [(b"X-Echo", title), (b"X-Tag", b"1"), (b"X-Tag", b"2"), (b"Content-Length", b"2")]
    server.replies.append(
        [b"HTTP/1.1 200 OK\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in reply) + b"\r\nok"]
    )
    response = await fetch(transport, request)
    assert response.status_code == 200 and response.content == b"ok"
    assert_sent_exactly(server.requests[0], request)
    assert server.requests[0].header("x-title") == title
    assert response.headers.raw == reply  # the answer's headers come back as sent, too


@pytest.mark.parametrize("method", ["GET", "DELETE", "OPTIONS", "POST"])
async def test_a_bodiless_request_gets_only_the_framing_it_holds(
    server: RawServer, transport: httpx.AsyncBaseTransport, method: str
) -> None:
    # httpx.Request holds `Content-Length: 0` for POST/PUT/PATCH and nothing for the rest.
    request = build(method, server.url)
    await fetch(transport, request)
    assert_sent_exactly(server.requests[0], request)


async def test_body_bytes_and_length_exact(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    body = bytes(range(256)) * 40
    request = build("POST", server.url, content=body)
    await fetch(transport, request)
    received = server.requests[0]
    assert_sent_exactly(received, request)
    assert received.header("content-length") == str(len(body)).encode()
    assert received.body == body


async def test_a_streamed_body_arrives_whole_and_chunked(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    pieces = [b"alpha ", b"", b"beta " * 1000, b"gamma"]

    async def upload() -> AsyncIterator[bytes]:
        for piece in pieces:
            await asyncio.sleep(0.01)
            yield piece

    request = build("POST", server.url, content=upload())
    await fetch(transport, request)
    received = server.requests[0]
    assert_sent_exactly(received, request)
    assert received.header("transfer-encoding") == b"chunked"
    assert received.content == b"".join(pieces)


async def test_a_broken_upload_raises_its_own_exception(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    async def upload() -> AsyncIterator[bytes]:
        yield b"part of a body"
        await asyncio.sleep(0.05)
        raise UploadBroke("client stalled")

    with pytest.raises(UploadBroke):
        await transport.handle_async_request(build("POST", server.url, content=upload()))


async def test_set_cookie_is_not_replayed(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    server.replies.append([answer("200 OK", "Set-Cookie: session=abc; Path=/")])
    first = await fetch(transport, build("GET", server.url))
    assert first.headers["set-cookie"] == "session=abc; Path=/"
    second = build("GET", server.url)
    await fetch(transport, second)
    assert server.requests[1].header("cookie") is None
    assert_sent_exactly(server.requests[1], second)


async def test_a_redirect_comes_back_as_is(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    server.replies.append([answer("302 Found", "Location: /elsewhere", body=b"")])
    response = await fetch(transport, build("GET", server.url))
    assert response.status_code == 302
    assert response.headers["location"] == "/elsewhere"
    assert response.extensions["reason_phrase"] == b"Found"
    await asyncio.sleep(0.05)
    assert len(server.requests) == 1


async def test_gzip_bytes_come_back_as_sent(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    packed = gzip.compress(b'{"choices": []}' * 200)
    server.replies.append([answer("200 OK", "Content-Encoding: gzip", body=packed)])
    response = await transport.handle_async_request(build("GET", server.url))
    try:
        raw = b"".join([piece async for piece in response.aiter_raw()])
    finally:
        await response.aclose()
    assert response.headers["content-encoding"] == "gzip"
    assert raw == packed


async def test_a_chunked_answer_arrives_piece_by_piece(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    go_on = asyncio.Event()
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    server.replies.append([head + chunk(b"first"), go_on, chunk(b"second") + b"0\r\n\r\n"])
    response = await transport.handle_async_request(build("GET", server.url))

    async def pieces() -> list[bytes]:
        out = []
        async for piece in response.aiter_raw():
            out.append(piece)
            go_on.set()  # only now does the server send the rest
        return out

    try:  # a transport that waits for the whole body hangs here: the server waits on us
        assert await asyncio.wait_for(pieces(), 5) == [b"first", b"second"]
    finally:
        await response.aclose()


async def test_connection_reuse(server: RawServer, transport: httpx.AsyncBaseTransport) -> None:
    for _ in range(2):
        assert (await fetch(transport, build("GET", server.url))).content == b"ok"
    assert server.connections == 1


async def test_a_half_read_answer_does_not_go_back_to_the_pool(
    server: RawServer, transport: httpx.AsyncBaseTransport
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"
    server.replies.append([head + b"0123456789"])  # half the body, then nothing more
    response = await transport.handle_async_request(build("GET", server.url))
    async with aclosing(cast(AsyncGenerator[bytes, None], response.aiter_raw())) as pieces:
        assert await asyncio.wait_for(anext(pieces), 5) == b"0123456789"
    await response.aclose()
    after = await fetch(transport, build("GET", server.url))
    assert (after.status_code, after.content) == (200, b"ok")
    assert server.connections == 2


async def test_connection_refused(transport: httpx.AsyncBaseTransport) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await transport.handle_async_request(build("GET", f"http://127.0.0.1:{port}/v1/x"))


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param([None], id="closed-without-answer"),
        pytest.param([b"garbage\r\n\r\n", None], id="garbage-status-line"),
        pytest.param(
            [b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"],
            id="conflicting-lengths",
        ),
    ],
)
async def test_a_broken_answer_is_a_remote_protocol_error(
    server: RawServer, transport: httpx.AsyncBaseTransport, reply: list[Step]
) -> None:
    server.replies.append(reply)
    with pytest.raises(httpx.RemoteProtocolError):
        await fetch(transport, build("GET", server.url))
    assert len(server.requests) == 1  # not sent again on a new connection


async def test_closed_mid_body(server: RawServer, transport: httpx.AsyncBaseTransport) -> None:
    server.replies.append([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", None])
    response = await transport.handle_async_request(build("GET", server.url))
    with pytest.raises(httpx.RemoteProtocolError):
        await response.aread()
    await response.aclose()


@pytest.mark.parametrize("stall", ["before-head", "mid-body"])
async def test_read_timeout(
    server: RawServer, transport: httpx.AsyncBaseTransport, stall: str
) -> None:
    hold = asyncio.Event()  # never set: the server goes silent
    if stall == "before-head":
        server.replies.append([hold])
    else:
        server.replies.append([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome", hold])
    request = build("GET", server.url, read=0.3)
    started = asyncio.get_running_loop().time()
    with pytest.raises(httpx.ReadTimeout):
        await fetch(transport, request)
    assert asyncio.get_running_loop().time() - started < 3
