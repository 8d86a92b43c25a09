"""Acting out a chat request's behaviour (Reply, Fail, Hang, Disconnect, StreamError): the
completion or its SSE stream, and where a scripted stream stalls, breaks or ends early."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .exchange import Exchange
from .models import Behaviour, Disconnect, Fail, Hang, ModelSpec, Received, Reply, StreamError
from .replies import chat_completion, default_reply, normalize_tool_calls
from .sse import DONE, encode_event, stream_chunks

Respond = Callable[[dict[str, Any]], Awaitable[Behaviour]]
StreamMode = Literal["hang", "disconnect", "error"] | None

_STREAM_OUTCOMES: dict[StreamMode, str] = {
    None: "reply",
    "hang": "hang",
    "disconnect": "disconnect",
    "error": "stream_error",
}


@dataclass
class ChatTurn:
    """One chat request being answered, and what answering it borrows from the simulator.
    The simulator's counters and settings are passed as callables so that each is read when
    used, as ``clear()`` or a test may change them while a request stalls."""

    exchange: Exchange
    body: dict[str, Any]
    spec: ModelSpec
    closing: asyncio.Event  # set by stop(): stalled and slow streams then drop their connection
    respond: Respond  # the responder's (else the default) behaviour for a body
    completion_id: Callable[[], str]
    call_id: Callable[[], str]
    chunk_delay_s: Callable[[], float]  # the simulator-wide default between stream chunks

    @property
    def rec(self) -> Received:
        return self.exchange.rec

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def model(self) -> str:
        return str(self.body.get("model"))


async def perform(behaviour: Behaviour, turn: ChatTurn) -> None:
    if isinstance(behaviour, Fail):
        await turn.exchange.send_fail(behaviour, outcome="fail")
    elif isinstance(behaviour, Hang):
        await _hang(behaviour, turn)
    elif isinstance(behaviour, Disconnect):
        await _disconnect(behaviour, turn)
    elif isinstance(behaviour, StreamError):
        await _stream_error(behaviour, turn)
    else:
        await _reply(behaviour, turn)


async def _hang(hang: Hang, turn: ChatTurn) -> None:
    if hang.after_chunks is not None and turn.stream:
        reply = await _reply_for(hang.then, turn)
        await _stream(turn, reply, stop_at=hang.after_chunks, mode="hang", hang_s=hang.seconds)
        return
    if not await turn.exchange.held(hang.seconds, turn.closing):
        return
    then = hang.then if hang.then is not None else await turn.respond(turn.body)
    if isinstance(then, Hang):
        then = default_reply(turn.body)
    await perform(then, turn)


async def _disconnect(disconnect: Disconnect, turn: ChatTurn) -> None:
    turn.rec.outcome = "disconnect"
    if not turn.stream:
        await turn.exchange.abort()
        return
    reply = await _reply_for(disconnect.reply, turn)
    await _stream(turn, reply, stop_at=disconnect.after_chunks, mode="disconnect")


async def _stream_error(stream_error: StreamError, turn: ChatTurn) -> None:
    if not turn.stream:
        error = {"error": stream_error.error}
        await turn.exchange.send_json(500, error, outcome="stream_error")
        return
    reply = await _reply_for(stream_error.reply, turn)
    await _stream(
        turn, reply, stop_at=stream_error.after_chunks, mode="error", error=stream_error.error
    )


async def _reply(reply: Reply, turn: ChatTurn) -> None:
    if turn.stream:
        await _stream(turn, reply)
        return
    tool_calls = normalize_tool_calls(reply.tool_calls or [], turn.call_id)
    payload = chat_completion(
        completion_id=turn.completion_id(),
        created=int(time.time()),
        model=turn.model,
        reply=reply,
        tool_calls=tool_calls,
        prompt_tokens=_prompt_tokens(reply, turn),
        include_usage=turn.spec.usage,
    )
    await turn.exchange.send_json(200, payload, outcome="reply")


async def _reply_for(given: Reply | Fail | None, turn: ChatTurn) -> Reply:
    """The content of a partial stream: ``given`` when it is a Reply, else the responder's."""
    if isinstance(given, Reply):
        return given
    result = await turn.respond(turn.body)
    return result if isinstance(result, Reply) else default_reply(turn.body)


def _prompt_tokens(reply: Reply, turn: ChatTurn) -> int:
    if reply.prompt_tokens is not None:
        return reply.prompt_tokens
    return turn.rec.prompt_tokens or 0


def _chunks(turn: ChatTurn, reply: Reply) -> list[dict[str, Any]]:
    options = turn.body.get("stream_options")
    asked = isinstance(options, dict) and bool(options.get("include_usage"))
    tool_calls = normalize_tool_calls(reply.tool_calls or [], turn.call_id)
    return list(
        stream_chunks(
            completion_id=turn.completion_id(),
            created=int(time.time()),
            model=turn.model,
            reply=reply,
            tool_calls=tool_calls,
            prompt_tokens=_prompt_tokens(reply, turn),
            include_usage=asked and turn.spec.stream_usage,
        )
    )


async def _stream(
    turn: ChatTurn,
    reply: Reply,
    *,
    stop_at: int | None = None,
    mode: StreamMode = None,
    hang_s: float = 0.0,
    error: dict[str, Any] | None = None,
) -> None:
    """Send ``reply`` as SSE; with a ``mode``, interrupt it after ``stop_at`` chunks."""
    chunks = _chunks(turn, reply)
    delay = reply.chunk_delay_s if reply.chunk_delay_s is not None else turn.chunk_delay_s()
    await turn.exchange.start_stream(_STREAM_OUTCOMES[mode])
    stop = min(stop_at, len(chunks)) if mode is not None and stop_at is not None else None
    for index in range(len(chunks) + 1):
        if index == stop and not await _interrupt(turn, mode, hang_s, error):
            return
        if index == len(chunks):
            break
        if not await _send_chunk(turn, chunks[index], delay):
            return
    await turn.exchange.send_frame(DONE, more=False)


async def _interrupt(
    turn: ChatTurn, mode: StreamMode, hang_s: float, error: dict[str, Any] | None
) -> bool:
    """Break the stream at its stop point; True when it goes on (a stall that ran out)."""
    exchange = turn.exchange
    if mode == "disconnect":
        await exchange.abort()
        return False
    if mode == "error":
        await exchange.send_frame(encode_event({"error": error}), more=True)
        await exchange.send_frame(b"", more=False)
        return False
    return await exchange.stalled(hang_s, turn.closing)


async def _send_chunk(turn: ChatTurn, chunk: dict[str, Any], delay: float) -> bool:
    """Send one chunk and wait ``delay``; False when the stream must end here."""
    return await turn.exchange.send_paced(encode_event(chunk), delay, turn.closing)
