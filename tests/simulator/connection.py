"""The simulator's hold on a client connection: reaching its transport, reading the request body,
waiting on it, and closing it abruptly (the Disconnect and Hang behaviours need a real close)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from uvicorn.protocols.http.h11_impl import H11Protocol

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
PauseResult = Literal["timeout", "gone", "closing"]

TRANSPORT_KEY = "ctxgate.simulator.transport"


class _AbruptClose(Exception):
    """Raised inside the ASGI app to make uvicorn drop the connection (fallback when the
    transport is not reachable)."""


class _QuietAbruptClose(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _AbruptClose)


logging.getLogger("uvicorn.error").addFilter(_QuietAbruptClose())


class SimH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that exposes the connection's transport to the app (in
    ``scope["extensions"]``) so the simulator can close a connection for real."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inner = self.app
        protocol = self

        async def app(scope: Any, receive: Any, send: Any) -> None:
            scope["extensions"] = {
                **(scope.get("extensions") or {}),
                TRANSPORT_KEY: protocol.transport,
            }
            await inner(scope, receive, send)

        self.app = app


def transport_of(scope: Scope) -> Any:
    """The connection's asyncio transport, or None when uvicorn did not go through
    SimH11Protocol."""
    return (scope.get("extensions") or {}).get(TRANSPORT_KEY)


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def pause(seconds: float, receive: Receive, closing: asyncio.Event) -> PauseResult:
    """Wait ``seconds`` -> "timeout"; or earlier "gone" (the client disconnected) or
    "closing" (stop() was called)."""
    closed = asyncio.ensure_future(closing.wait())
    gone = asyncio.ensure_future(receive())
    try:
        done, _ = await asyncio.wait(
            {closed, gone}, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        pending = [t for t in (closed, gone) if not t.done()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    if closed in done:
        return "closing"
    if gone in done:
        return "gone"
    return "timeout"


async def abort(scope: Scope, receive: Receive) -> None:
    """Close the connection for real (no response / an incomplete body)."""
    transport = transport_of(scope)
    if transport is None:
        raise _AbruptClose("simulated disconnect")
    transport.close()
    try:
        await asyncio.wait_for(receive(), 1.0)  # returns once uvicorn saw the connection go
    except TimeoutError:
        pass
