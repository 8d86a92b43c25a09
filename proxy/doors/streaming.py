"""Relaying an upstream SSE stream, reading only what ctxgate needs.

Events are forwarded as soon as they are complete, byte for byte. What an event means (usage,
the end of the answer, an error) is the front door's `StreamWatch`'s business; a broken
upstream becomes one error event in the door's shape, which the client's SDK raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx
import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from session.ports.frontdoor import AnswerStream, CallFilter, StreamWatch

_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


def error_event(message: str, type_: str = "upstream_error", code: str | None = None) -> bytes:
    error = {"message": message, "type": type_, "param": None, "code": code}
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


def error_status(data: bytes) -> int | None:
    """The HTTP status an event's data stands for when it is an error object, else None.

    After their 200, providers report failures in the stream: `{"error": {...}}` (OpenAI,
    vLLM, llama.cpp), `{"type": "error", ...}` (Anthropic, OpenAI Responses) or vLLM's older
    `{"object": "error", ...}`; the status is the error's own code when it carries one.
    """
    if not data.lstrip().startswith(b"{") or b"error" not in data:
        return None
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    if "error" not in parsed and "error" not in (parsed.get("type"), parsed.get("object")):
        return None
    inner = parsed.get("error")
    code = inner.get("code") if isinstance(inner, dict) else parsed.get("code")
    if isinstance(code, int) and 400 <= code < 600:
        return code
    return 400


def _split(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete events at the start of `buffer`, and what follows them."""
    events: list[bytes] = []
    start = 0
    # Where each separator occurs next; one absent from the buffer is never searched again.
    ahead = {sep: buffer.find(sep) for sep in _SEPARATORS}
    while True:
        best, width = -1, 0
        for sep, at in ahead.items():
            if -1 < at < start:
                at = ahead[sep] = buffer.find(sep, start)
            if at != -1 and (best == -1 or at < best):
                best, width = at, len(sep)
        if best == -1:
            return events, buffer[start:]
        events.append(buffer[start : best + width])
        start = best + width


def _data(event: bytes) -> bytes:
    lines = [line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines)


class StreamRelay:
    """Iterate `relay.events()` to get the bytes for the client; read the watch afterwards.

    Complete events are relayed as they arrive. Only the events holding one of the watch's
    markers are shown to the watch (which may drop one); the rest pass through untouched, so
    a delta costs a few byte searches, not a parse.
    `first_event()` may read ahead before that, so that an error the upstream sends in place
    of the stream is seen while the client can still get a retried stream instead.
    """

    def __init__(self, response: httpx.Response, watch: StreamWatch) -> None:
        # The transport's own stream: `aiter_raw` would re-chunk and count every piece.
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        self._pieces = stream.__aiter__()
        self._buffer = b""  # read ahead, not yet relayed
        self._broken: httpx.HTTPError | None = None  # met while reading ahead
        self.watch = watch
        self.filter: CallFilter | None = None  # rewrites every event the client gets, when set

    @property
    def failed(self) -> str | None:
        return self.watch.failed

    async def first_event(self, comments_s: float = 1.0) -> bytes | None:
        """The data of the stream's first telling event, read ahead and kept for `events()`.

        Comment events and the watch's preamble events (lifecycle events that precede an
        error as readily as an answer) are read past, comments for up to `comments_s` seconds
        (OpenRouter opens with ": OPENROUTER PROCESSING" and may report the error after it);
        a stream that keeps commenting past that gives b"" and is relayed as it is.
        None when the stream ended, or broke, before an event was complete.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + comments_s
        while True:
            events, _ = _split(self._buffer)
            for event in events:
                data = _data(event)
                if data and not self.watch.preamble(data):
                    return data
            if events and loop.time() >= deadline:
                return b""
            try:
                self._buffer += await self._pieces.__anext__()
            except (StopAsyncIteration, httpx.HTTPError):
                return b"" if events else None  # `events()` meets the same end and reports it

    async def hold(self, answer: AnswerStream, to_end: bool = False) -> list[bytes]:
        """Read ahead, event by event, until `answer` has decided what the stream is (or to
        its end); the events the client would get, in order. Each is shown to the watch and
        fed to `answer`; what is left unread stays for `events()`."""
        held: list[bytes] = []
        while True:
            events, self._buffer = _split(self._buffer)
            for at, event in enumerate(events):
                data = _data(event)
                if self.watch.inspect(data):
                    held.append(event)
                answer.feed(data)
                if answer.decided is not None and not to_end:
                    self._buffer = b"".join(events[at + 1 :]) + self._buffer
                    return held
            try:
                self._buffer += await self._pieces.__anext__()
            except StopAsyncIteration:
                return held
            except httpx.HTTPError as exc:
                self._broken = exc
                return held

    def _relayable(self, complete: bytes) -> bytes:
        """The bytes of complete events to pass on, after the watch saw those it wants."""
        if self.filter is not None:
            return self.filtered(_kept(complete, self._shown))
        found = [at for at in map(complete.find, self.watch.markers) if at != -1]
        if not found:
            return complete
        # The events before the one holding the first marker go as they are, unsplit.
        cut = _last_boundary(complete, end=min(found))
        return complete[:cut] + b"".join(_kept(complete[cut:], self._shown_if_marked))

    def _shown(self, event: bytes) -> bool:
        return self.watch.inspect(_data(event))

    def _shown_if_marked(self, event: bytes) -> bool:
        """An event without any of the watch's markers means nothing to it: passed on unread."""
        return not any(m in event for m in self.watch.markers) or self._shown(event)

    def filtered(self, events: Iterable[bytes]) -> bytes:
        """Events as the client gets them through the filter (as they are without one)."""
        if self.filter is None:
            return b"".join(events)
        return b"".join(out for out in map(self.filter.event, events) if out is not None)

    async def events(self) -> AsyncIterator[bytes]:
        buffer, self._buffer = self._buffer, b""
        try:
            if self._broken is not None:
                raise self._broken
            while True:
                cut = _last_boundary(buffer)
                if cut:
                    out = self._relayable(buffer[:cut])
                    buffer = buffer[cut:]
                    if out:
                        yield out
                buffer += await self._pieces.__anext__()
        except StopAsyncIteration:
            pass
        except httpx.HTTPError as exc:
            self.watch.failed = f"upstream stream broke: {type(exc).__name__}"
            yield self.watch.error_event(
                f"The upstream stream was interrupted ({type(exc).__name__})."
            )
            return
        if buffer.strip():
            tail = buffer + b"\n\n"
            if self.watch.inspect(_data(tail)):
                yield self.filtered([tail])
        if not self.watch.finished:
            self.watch.failed = "upstream closed the stream without finishing"
            yield self.watch.error_event(
                "The upstream closed the stream before the response was complete."
            )


def _kept(complete: bytes, keep: Callable[[bytes], bool]) -> Iterator[bytes]:
    """The complete events of `complete` that `keep` keeps, in order."""
    events, _ = _split(complete)
    return (event for event in events if keep(event))


def _last_boundary(buffer: bytes, end: int | None = None) -> int:
    """The end of the last complete event in `buffer[:end]` (0 when none is complete)."""
    best = 0
    for sep in _SEPARATORS:
        at = buffer.rfind(sep, 0, end)
        if at != -1 and at + len(sep) > best:
            best = at + len(sep)
    return best


class EventStreamResponse(Response):
    """ASGI response relaying `events` as `text/event-stream`, stopped when the client leaves.

    Starlette's StreamingResponse watches for the disconnect through an anyio task group
    whose cancellation formats the task's repr: a few dozen microseconds per stream. Here a
    plain task waits for `http.disconnect` and cancels the relaying task once; the events
    iterator's cleanup (closing the upstream call) runs in that task as the CancelledError
    passes through it.
    """

    def __init__(
        self, events: AsyncIterator[bytes], status_code: int, headers: Mapping[str, str]
    ) -> None:
        self.events = events
        self.status_code = status_code
        self.background = None
        self.media_type = "text/event-stream"
        self.init_headers(headers)
        self.client_left = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.ensure_future(self._watch(receive, task))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self.client_left:
                raise
            task.uncancel()  # our own cancellation: the response simply ends
        finally:
            watcher.cancel()

    async def _watch(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.client_left = True
        task.cancel()
