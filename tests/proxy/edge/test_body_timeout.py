"""A client that starts a request body and stalls is answered 408 and let go, on every route
that reads a body; a slow but steady upload is not a stall."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer
from tests.simulator import Simulator

BODY = json.dumps(
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello " * 20}]}
).encode()


proxy = proxy_fixture(server={"body_timeout_s": 1.0})


def head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer sk-client\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    sock.settimeout(limit_s)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_half_a_chat_body_then_silence_gets_408_and_a_closed_connection(
    sim: Simulator, proxy: ProxyServer, path: str
) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(head(path, len(BODY)) + BODY[: len(BODY) // 2])
        started = time.monotonic()
        answer = read_until_closed(sock, limit_s=10)  # closed by the server, or this raises
        waited = time.monotonic() - started
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408"), answer
    body = rest.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert 0.9 <= waited < 5
    assert sim.chat_requests == []


def test_stalled_body_on_the_manual_compress_route(proxy: ProxyServer) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(head("/v1/sessions/s1/compress", 40) + b'{"focus": ')
        answer = read_until_closed(sock, limit_s=10)
    assert answer.startswith(b"HTTP/1.1 408"), answer


def test_a_slow_steady_upload_is_not_a_stall(sim: Simulator, proxy: ProxyServer) -> None:
    pieces = [BODY[i : i + len(BODY) // 4 + 1] for i in range(0, len(BODY), len(BODY) // 4 + 1)]
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(head("/v1/chat/completions", len(BODY)))
        for piece in pieces:  # 4 pieces 0.6 s apart: 1.8 s in all, longer than the timeout
            time.sleep(0.6)
            sock.sendall(piece)
        sock.settimeout(10)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert len(sim.chat_requests) == 1


def test_many_stalled_uploads_are_all_let_go(proxy: ProxyServer) -> None:
    sockets = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(30)]
    try:
        for sock in sockets:
            sock.sendall(head("/v1/chat/completions", len(BODY)) + BODY[:10])
        answers = [read_until_closed(sock, limit_s=10) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers)


def test_a_stalled_upload_on_a_relayed_route_is_let_go(sim: Simulator, proxy: ProxyServer) -> None:
    part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n\r\n'
    head_ = (
        b"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.sendall(head_ + part + b"x" * 1000)
        started = time.monotonic()
        answer = read_until_closed(sock, limit_s=10)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert waited < 5
