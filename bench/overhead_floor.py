"""The floor of bench/overhead.py: the least a Python relay can add in front of the upstream.

A bare ASGI app served by uvicorn with uvloop + httptools (what `ctxgate serve` runs on): it
reads the request body, sends it with one shared httpx transport to the same path on the
upstream, and relays the answer: a whole body at once, or an event stream chunk by chunk as the
chunks arrive. No parsing, no framework, no logging. What ctxgate adds above this is the cost
of what ctxgate does; what this adds over a direct call is the cost of being a Python proxy.

`--client aiohttp` puts ctxgate's own transport (proxy/provider/transport.py: aiohttp under httpx's
transport API) in place of httpx's default one: the floor of ctxgate's stack as it ships.

    python -m bench.overhead_floor --port 8899 --upstream http://127.0.0.1:8898/v1
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import httpx

from proxy.provider.transport import new_http_transport

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The headers a provider needs from the client; everything else is hop-by-hop or irrelevant.
FORWARDED = frozenset({b"authorization", b"content-type", b"accept", b"openai-organization"})
TIMEOUT = httpx.Timeout(120.0, connect=10.0).as_dict()


class Relay:
    """ASGI app: `/v1/<path>` goes to `<upstream>/<path>`; `/health` answers itself."""

    def __init__(self, upstream: str, client: str = "httpx") -> None:
        self.upstream = upstream.rstrip("/")
        # The transport, not an AsyncClient: ctxgate calls its transport directly as well, so
        # the client layer's cookies/redirects/auth machinery is in neither figure.
        self.transport = new_http_transport(client)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if scope["path"] == "/health":
                await _answer(send, 200, b"application/json", b'{"status":"ok"}')
            else:
                await self._relay(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.transport.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _relay(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        path: str = scope["path"].removeprefix("/v1")
        headers = [(k, v) for k, v in scope["headers"] if k in FORWARDED]
        request = httpx.Request(
            scope["method"],
            self.upstream + path,
            content=body,
            headers=headers,
            extensions={"timeout": TIMEOUT},
        )
        try:
            response = await self.transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            await _answer(send, 502, b"text/plain", type(exc).__name__.encode())
            return
        try:
            kind = response.headers.get("content-type", "application/json").encode()
            if kind.startswith(b"text/event-stream"):
                await _relay_stream(response, kind, send)
            else:
                content = b"".join([chunk async for chunk in response.aiter_raw()])
                await _answer(send, response.status_code, kind, content)
        finally:
            await response.aclose()


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _relay_stream(response: httpx.Response, kind: bytes, send: Send) -> None:
    headers = [(b"content-type", kind), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    async for chunk in response.aiter_raw():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _answer(send: Send, status: int, kind: bytes, content: bytes) -> None:
    headers = [(b"content-type", kind), (b"content-length", str(len(content)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:PORT/v1")
    p.add_argument("--client", choices=("httpx", "aiohttp"), default="httpx")
    args = p.parse_args(argv)
    uvicorn.run(
        Relay(args.upstream, args.client),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
