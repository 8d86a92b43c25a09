"""Acting out a behaviour (Reply, Fail, Hang, Disconnect, StreamError) on a ``POST /v1/responses``
request: the completed response object, or its event stream, and where a scripted stream stalls,
breaks or fails."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .exchange import Exchange
from .models import Behaviour, Disconnect, Fail, Hang, Reply, StreamError
from .responses_output import failed
from .responses_sse import Event, encode, failure_events, response_events

Respond = Callable[[], Awaitable[Behaviour]]


@dataclass
class ResponsesTurn:
    """One Responses request being answered. ``finish`` turns a Reply into its output items and
    the final response object (and stores it); ``respond`` asks the responder again (after a
    Hang, or for a partial stream's content)."""

    exchange: Exchange
    stream: bool
    response: dict[str, Any]  # the in-progress response object
    finish: Callable[[Reply], tuple[list[dict[str, Any]], dict[str, Any]]]
    respond: Respond
    closing: asyncio.Event
    chunk_delay_s: float


async def perform(behaviour: Behaviour, turn: ResponsesTurn) -> None:
    if isinstance(behaviour, Fail):
        await turn.exchange.send_fail(behaviour, outcome="fail")
    elif isinstance(behaviour, Hang):
        await _hang(behaviour, turn)
    elif isinstance(behaviour, Disconnect):
        turn.exchange.rec.outcome = "disconnect"
        if not turn.stream:
            await turn.exchange.abort()
            return
        reply = await _reply_for(behaviour.reply, turn)
        await _stream(turn, reply, stop_at=behaviour.after_chunks, mode="disconnect")
    elif isinstance(behaviour, StreamError):
        if not turn.stream:
            await turn.exchange.send_json(500, {"error": behaviour.error}, outcome="stream_error")
            return
        reply = await _reply_for(behaviour.reply, turn)
        await _stream(
            turn, reply, stop_at=behaviour.after_chunks, mode="error", error=behaviour.error
        )
    else:
        await _reply(behaviour, turn)


async def send_failed_stream(exchange: Exchange, response: dict[str, Any], body: Any) -> None:
    """A 200 stream that fails after response.created and response.in_progress (how the
    Responses API reports an overflow it finds once the stream has begun)."""
    error = body["error"]
    events = failure_events(response, failed(response, error["code"], error["message"]))
    await exchange.start_stream("overflow")
    for event in events:
        await exchange.send_frame(encode(event), more=True)
    await exchange.send_frame(b"", more=False)


async def _reply(reply: Reply, turn: ResponsesTurn) -> None:
    if turn.stream:
        await _stream(turn, reply)
        return
    _items, final = turn.finish(reply)
    await turn.exchange.send_json(200, final, outcome="reply")


async def _reply_for(given: Reply | Fail | None, turn: ResponsesTurn) -> Reply:
    if isinstance(given, Reply):
        return given
    result = await turn.respond()
    return result if isinstance(result, Reply) else Reply(content="ok")


async def _hang(hang: Hang, turn: ResponsesTurn) -> None:
    if hang.after_chunks is not None and turn.stream:
        reply = await _reply_for(hang.then, turn)
        await _stream(turn, reply, stop_at=hang.after_chunks, mode="hang", hang_s=hang.seconds)
        return
    if not await turn.exchange.held(hang.seconds, turn.closing):
        return
    then = hang.then if hang.then is not None else await turn.respond()
    await perform(then if not isinstance(then, Hang) else Reply(content="ok"), turn)


_OUTCOMES = {None: "reply", "hang": "hang", "disconnect": "disconnect", "error": "stream_error"}


async def _stream(
    turn: ResponsesTurn,
    reply: Reply,
    *,
    stop_at: int | None = None,
    mode: str | None = None,
    hang_s: float = 0.0,
    error: dict[str, Any] | None = None,
) -> None:
    """Send the response's events; with a ``mode``, interrupt them after ``stop_at`` events."""
    items, final = turn.finish(reply)
    events = response_events(turn.response, final, items)
    delay = reply.chunk_delay_s if reply.chunk_delay_s is not None else turn.chunk_delay_s
    await turn.exchange.start_stream(_OUTCOMES[mode])
    stop = min(stop_at, len(events)) if mode is not None and stop_at is not None else None
    for index, event in enumerate(events):
        if index == stop and not await _interrupt(turn, mode, hang_s, error, index):
            return
        if not await _send(turn, event, delay):
            return
    await turn.exchange.send_frame(b"", more=False)


async def _interrupt(
    turn: ResponsesTurn, mode: str | None, hang_s: float, error: dict[str, Any] | None, at: int
) -> bool:
    """Break the stream at its stop point; True when it goes on (a stall that ran out)."""
    exchange = turn.exchange
    if mode == "disconnect":
        await exchange.abort()
        return False
    if mode == "error":
        error = error or {}
        code = str(error.get("code") or error.get("type") or "server_error")
        message = str(error.get("message", "An error occurred while processing your request."))
        event = {
            "type": "response.failed",
            "response": failed(turn.response, code, message),
            "sequence_number": at,
        }
        await exchange.send_frame(encode(event), more=True)
        await exchange.send_frame(b"", more=False)
        return False
    return await exchange.stalled(hang_s, turn.closing)


async def _send(turn: ResponsesTurn, event: Event, delay: float) -> bool:
    """Send one event and wait ``delay``; False when the stream must end here."""
    return await turn.exchange.send_paced(encode(event), delay, turn.closing)
