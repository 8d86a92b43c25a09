"""One request/response on the simulator's ASGI app and the writers of its answers (JSON, raw,
an error event, the SSE stream's frames). Each answer also sets the log entry's status and
outcome, so ``sim.received`` tells what the client got."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from .connection import PauseResult, Receive, Scope, Send, abort, pause, transport_of
from .models import Fail, Received


def json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode()


def parse_request(scope: Scope, raw: bytes) -> tuple[Received, bool]:
    """The log entry of a request (header names lower-cased, repeated ones joined), and whether
    its body failed to parse as JSON."""
    headers: dict[str, str] = {}
    for k, v in scope.get("headers", []):
        name, value = k.decode("latin-1").lower(), v.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    body: Any = None
    parse_error = False
    if raw:
        try:
            body = json.loads(raw)
        except ValueError:
            parse_error = True
    rec = Received(
        path=scope.get("path", ""),
        method=scope.get("method", "GET"),
        headers=headers,
        body=body,
        raw=raw,
        prompt_tokens=None,
        at=time.monotonic(),
    )
    return rec, parse_error


@dataclass
class Exchange:
    """The ASGI callables of one request, and its entry in the received log."""

    scope: Scope
    receive: Receive
    send: Send
    rec: Received

    @property
    def transport(self) -> Any:
        return transport_of(self.scope)

    @property
    def request_id(self) -> bytes:
        return f"req_sim_{id(self.rec):x}".encode()

    async def send_json(self, status: int, payload: Any, outcome: str) -> None:
        await self.send_raw(status, json_bytes(payload), "application/json", None, outcome)

    async def send_fail(self, fail: Fail, outcome: str) -> None:
        payload, content_type = fail.encoded()
        await self.send_raw(fail.status, payload, content_type, fail.headers, outcome)

    async def send_raw(
        self,
        status: int,
        payload: bytes,
        content_type: str,
        extra: dict[str, str] | None,
        outcome: str,
    ) -> None:
        headers: list[tuple[bytes, bytes]] = []
        given = {k.lower() for k in (extra or {})}
        if "content-type" not in given:
            headers.append((b"content-type", content_type.encode()))
        headers.append((b"content-length", str(len(payload)).encode()))
        headers.append((b"x-request-id", self.request_id))
        for k, v in (extra or {}).items():
            if k.lower() != "content-length":
                headers.append((k.lower().encode("latin-1"), str(v).encode("latin-1")))
        self.rec.status, self.rec.outcome = status, outcome
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": payload, "more_body": False})

    async def send_error_event(self, fail: Fail) -> None:
        """A 200 stream whose one event is the error (no [DONE]), as providers that report
        errors after the status line do."""
        payload, _ = fail.encoded()
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        self.rec.status, self.rec.outcome = 200, "overflow"
        event = b"data: " + payload + b"\n\n"
        await self.send({"type": "http.response.body", "body": event, "more_body": False})

    async def start_stream(self, outcome: str) -> None:
        """The 200 status line and SSE headers; the frames follow with ``send_frame``."""
        await self.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-request-id", self.request_id),
                ],
            }
        )
        self.rec.status = 200
        self.rec.outcome = outcome

    async def send_frame(self, body: bytes, *, more: bool) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": more})

    async def pause(self, seconds: float, closing: asyncio.Event) -> PauseResult:
        return await pause(seconds, self.receive, closing)

    async def held(self, seconds: float, closing: asyncio.Event) -> bool:
        """A hang before the answer; True when it ran out and the answer follows, False when
        stop() was called (outcome "hang", the connection cut) or the client went away."""
        result = await self.pause(seconds, closing)
        if result == "closing":
            self.rec.outcome = "hang"
            await self.abort()
            return False
        if result == "gone":
            self.rec.outcome = "client_gone"
            return False
        return True

    async def stalled(self, seconds: float, closing: asyncio.Event) -> bool:
        """A stall in the stream; True when it ran out and the stream goes on, False when the
        stream ends here (stop() was called, or the client went away)."""
        result = await self.pause(seconds, closing)
        if result == "closing":
            await self.abort()
            return False
        if result == "gone":
            self.rec.outcome = "client_gone"
            return False
        self.rec.outcome = "reply"
        return True

    async def send_paced(
        self, frame: bytes, delay: float, closing: asyncio.Event, *, more: bool = True
    ) -> bool:
        """Send one frame, then wait `delay` unless it was the last; False when the stream must
        end here (the client went away, or stop() was called)."""
        await self.send_frame(frame, more=more)
        transport = self.transport
        if transport is not None and transport.is_closing():
            self.rec.outcome = "client_gone"
            return False
        if delay > 0 and more:
            try:
                await asyncio.wait_for(closing.wait(), delay)
            except TimeoutError:
                return True
            await self.abort()
            return False
        await asyncio.sleep(0)
        return True

    async def abort(self) -> None:
        await abort(self.scope, self.receive)
