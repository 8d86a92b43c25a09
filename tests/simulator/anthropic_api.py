"""The Anthropic Messages dialect of the simulator: ``POST /v1/messages`` (streamed and not),
``POST /v1/messages/count_tokens`` and the ``HEAD /`` probe Claude Code sends first. Requests
are checked like the real API checks them (``anthropic_rules``), billed with prompt caching
(``anthropic_cache``), and answered from the simulator's behaviour queue or responder."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .anthropic_cache import CacheUsage, PromptCache
from .anthropic_compaction import compaction_block, compacts
from .anthropic_prompt import count_messages_tokens, prompt_of
from .anthropic_rules import (
    ThinkingSigner,
    anthropic_error,
    field_problem,
    header_problem,
    request_problems,
)
from .anthropic_sse import (
    Answer,
    Event,
    content_blocks,
    encode,
    message_object,
    output_tokens_of,
    start_event,
    stop_reason_of,
    stream_events,
    thinking_mode,
)
from .dialects import overflow_error
from .endpoints import MODEL_PREFIX, is_models_path, presented_key
from .exchange import Exchange
from .models import Behaviour, Disconnect, Fail, Hang, ModelSpec, Received, Reply, StreamError
from .replies import default_reply

if TYPE_CHECKING:
    from .server import Simulator

MESSAGES_PATHS = ("/v1/messages", "/messages")
COUNT_TOKENS_PATHS = ("/v1/messages/count_tokens", "/messages/count_tokens")
DEFAULT_BODY_LIMIT = 32 * 1024 * 1024  # the API's request size limit for standard endpoints


def is_messages_path(norm: str) -> bool:
    return norm in MESSAGES_PATHS or norm in COUNT_TOKENS_PATHS


def is_root(norm: str) -> bool:
    return norm == "/"


def _model_entry(name: str, spec: ModelSpec) -> dict[str, Any]:
    return {
        "type": "model",
        "id": name,
        "display_name": name,
        "created_at": "2025-01-01T00:00:00Z",
        "max_input_tokens": spec.window,
    }


@dataclass
class MessagesTurn:
    exchange: Exchange
    body: dict[str, Any]
    spec: ModelSpec
    key: str

    @property
    def rec(self) -> Received:
        return self.exchange.rec

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


class MessagesAPI:
    """The simulator's Anthropic side; one per simulator (``sim.messages_api``).

    require_version       a request without ``anthropic-version`` gets the API's 400
    count_tokens_enabled  False: ``/v1/messages/count_tokens`` answers 404 (like a provider
                          that lacks it)
    cache                 the prompt cache (``cache.clear()`` forgets every written prefix)
    signer                signs thinking blocks and checks those sent back
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.require_version = True
        self.count_tokens_enabled = True
        self.cache = PromptCache()
        self.signer = ThinkingSigner()
        self._message_ids = itertools.count(1)
        self._tool_ids = itertools.count(1)

    def reset(self) -> None:
        self.cache.clear()
        self._message_ids = itertools.count(1)
        self._tool_ids = itertools.count(1)

    # ------------------------------------------------------------------ log
    def inspect(self, rec: Received) -> None:
        """Fill a logged Messages request's token count, summary flag and rule problems."""
        body = rec.body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return
        spec = self.sim.spec_for(body.get("model"))
        rec.prompt_tokens = count_messages_tokens(body, spec.token_factor)
        rec.is_summary = bool(self.sim.summary_detector(body))
        rec.problems = [text for _kind, text in request_problems(body, self.signer)]

    # ------------------------------------------------------------------ routing
    def serves(self, rec: Received, norm: str) -> bool:
        """Messages paths, the ``/`` probe, and the models list asked in Anthropic's way."""
        anthropic_models = is_models_path(norm) and "anthropic-version" in rec.headers
        return is_messages_path(norm) or is_root(norm) or anthropic_models

    async def handle(self, exchange: Exchange, norm: str) -> None:
        rec = exchange.rec
        if is_models_path(norm):
            await self._send_models(exchange, norm)
            return
        if is_root(norm):
            await exchange.send_raw(200, b"", "text/plain", None, outcome="reply")
            return
        if rec.method != "POST":
            error = anthropic_error("not_found_error", "Not Found")
            await exchange.send_json(404, error, outcome="not_found")
            return
        refusal = self._refusal(rec, norm)
        if refusal is not None:
            status, error, outcome = refusal
            await exchange.send_json(status, error, outcome=outcome)
            return
        body: dict[str, Any] = rec.body
        if norm in COUNT_TOKENS_PATHS:
            await exchange.send_json(200, {"input_tokens": rec.prompt_tokens}, outcome="reply")
            return
        spec = self.sim.spec_for(body.get("model"))
        turn = MessagesTurn(exchange, body, spec, presented_key(rec.headers) or "")
        await self._answer(turn)

    def _refusal(self, rec: Received, norm: str) -> tuple[int, Any, str] | None:
        """The API's 4xx for this request, checked in the provider's order, else None."""
        key = presented_key(rec.headers)
        required = self.sim.required_api_key
        if required is not None and key != required:
            message = "invalid x-api-key" if key else "x-api-key header is required"
            return 401, anthropic_error("authentication_error", message), "unauthorized"
        if norm in COUNT_TOKENS_PATHS and not self.count_tokens_enabled:
            return 404, anthropic_error("not_found_error", "Not Found"), "not_found"
        problem = header_problem(rec.headers, self.require_version)
        if problem is not None:
            return 400, anthropic_error("invalid_request_error", problem), "bad_request"
        spec = self.sim.spec_for(rec.body.get("model") if isinstance(rec.body, dict) else None)
        limit = spec.max_body_bytes if spec.max_body_bytes is not None else DEFAULT_BODY_LIMIT
        if len(rec.raw) > limit:
            message = (
                "Request exceeds the maximum allowed number of bytes. "
                f"The maximum request size is {limit} bytes for standard API endpoints."
            )
            return 413, anthropic_error("request_too_large", message), "overflow"
        problem = field_problem(rec.body, count_only=norm in COUNT_TOKENS_PATHS)
        if problem is not None:
            return 400, anthropic_error("invalid_request_error", problem), "bad_request"
        problems = request_problems(rec.body, self.signer)
        if problems:
            return 400, anthropic_error("invalid_request_error", problems[0][1]), "invalid_messages"
        return None

    async def _send_models(self, exchange: Exchange, norm: str) -> None:
        """``GET /v1/models`` and ``/v1/models/{id}`` in the Anthropic shape."""
        models = self.sim.models
        name = norm[len(MODEL_PREFIX) :] if norm.startswith(MODEL_PREFIX) else None
        if name is None:
            data = [_model_entry(n, spec) for n, spec in models.items()]
            first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
            page = {"data": data, "has_more": False, "first_id": first, "last_id": last}
            await exchange.send_json(200, page, outcome="reply")
        elif name in models:
            await exchange.send_json(200, _model_entry(name, models[name]), outcome="reply")
        else:
            error = anthropic_error("not_found_error", f"model: {name}")
            await exchange.send_json(404, error, outcome="not_found")

    # ------------------------------------------------------------------ answering
    async def _answer(self, turn: MessagesTurn) -> None:
        overflow = self._overflow(turn)
        if overflow is not None:
            if turn.stream and turn.spec.stream_errors == "event":
                await self._overflow_event(turn, overflow)
            else:
                await turn.exchange.send_fail(overflow, outcome="overflow")
            return
        try:
            behaviour = await self.sim.behaviour_for(turn.body)
        except Exception as exc:
            logging.getLogger(__name__).exception("simulator responder failed")
            error = anthropic_error("api_error", f"simulator responder raised {exc!r}")
            await turn.exchange.send_json(500, error, outcome="responder_error")
            return
        await self._perform(behaviour, turn)

    def _overflow(self, turn: MessagesTurn) -> Fail | None:
        spec = dataclasses.replace(turn.spec, dialect="anthropic")
        return overflow_error(spec, turn.rec.prompt_tokens or 0, turn.body, len(turn.rec.raw))

    async def _overflow_event(self, turn: MessagesTurn, overflow: Fail) -> None:
        """A 200 stream that starts, then reports the overflow as an ``error`` event."""
        answer = self._build(turn, Reply(content=""), bill=False)
        await turn.exchange.start_stream("overflow")
        await turn.exchange.send_frame(encode(start_event(answer)), more=True)
        await turn.exchange.send_frame(encode(("error", overflow.body)), more=False)

    async def _perform(self, behaviour: Behaviour, turn: MessagesTurn) -> None:
        if isinstance(behaviour, Fail):
            await turn.exchange.send_fail(behaviour, outcome="fail")
        elif isinstance(behaviour, Hang):
            await self._hang(behaviour, turn)
        elif isinstance(behaviour, Disconnect):
            await self._disconnect(behaviour, turn)
        elif isinstance(behaviour, StreamError):
            await self._stream_error(behaviour, turn)
        else:
            await self._reply(behaviour, turn)

    async def _reply_for(self, given: Reply | Fail | None, turn: MessagesTurn) -> Reply:
        if isinstance(given, Reply):
            return given
        result = await self.sim.behaviour_for(turn.body, scripted=False)
        return result if isinstance(result, Reply) else default_reply(turn.body)

    async def _hang(self, hang: Hang, turn: MessagesTurn) -> None:
        if hang.after_chunks is not None and turn.stream:
            reply = await self._reply_for(hang.then, turn)
            await self._stream(turn, reply, stop_at=hang.after_chunks, hang_s=hang.seconds)
            return
        if not await turn.exchange.held(hang.seconds, self._closing()):
            return
        then = hang.then if hang.then is not None else await self._reply_for(None, turn)
        await self._perform(then, turn)

    async def _disconnect(self, disconnect: Disconnect, turn: MessagesTurn) -> None:
        turn.rec.outcome = "disconnect"
        if not turn.stream:
            await turn.exchange.abort()
            return
        reply = await self._reply_for(disconnect.reply, turn)
        await self._stream(turn, reply, stop_at=disconnect.after_chunks, mode="disconnect")

    async def _stream_error(self, stream_error: StreamError, turn: MessagesTurn) -> None:
        payload = {"type": "error", "error": _anthropic_shaped(stream_error.error)}
        if not turn.stream:
            await turn.exchange.send_json(500, payload, outcome="stream_error")
            return
        reply = await self._reply_for(stream_error.reply, turn)
        await self._stream(
            turn, reply, stop_at=stream_error.after_chunks, mode="stream_error", error=payload
        )

    async def _reply(self, reply: Reply, turn: MessagesTurn) -> None:
        if turn.stream:
            await self._stream(turn, reply)
            return
        answer = self._build(turn, reply)
        await turn.exchange.send_json(200, message_object(answer), outcome="reply")

    def _build(self, turn: MessagesTurn, reply: Reply, *, bill: bool = True) -> Answer:
        blocks = content_blocks(
            reply,
            thinking=thinking_mode(turn.body),
            signer=self.signer,
            next_id=lambda: f"toolu_01Sim{next(self._tool_ids):013d}",
        )
        stop_reason = stop_reason_of(reply)
        edit = compacts(turn.body, turn.rec.prompt_tokens or 0) if bill else None
        if edit is not None:
            paused = edit.get("pause_after_compaction") is True
            blocks = [compaction_block(turn.body), *([] if paused else blocks)]
            stop_reason = "compaction" if paused else stop_reason
        usage = self._usage(turn, reply, bill)
        answer = Answer(
            message_id=f"msg_01Sim{next(self._message_ids):013d}",
            model=str(turn.body.get("model")),
            content=blocks,
            stop_reason=stop_reason,
            usage=usage,
            output_tokens=output_tokens_of(reply, blocks),
        )
        if bill:
            turn.rec.usage = answer.usage_dict()
        return answer

    def _usage(self, turn: MessagesTurn, reply: Reply, bill: bool) -> CacheUsage:
        prompt = prompt_of(turn.body)
        spec, model = turn.spec, str(turn.body.get("model"))
        bill_it = self.cache.use if bill else self.cache.peek
        usage = bill_it(turn.key, model, prompt, spec.token_factor, spec.cache_min_tokens)
        if reply.prompt_tokens is not None:
            return CacheUsage(reply.prompt_tokens, 0, 0)
        return usage

    async def _stream(
        self,
        turn: MessagesTurn,
        reply: Reply,
        *,
        stop_at: int | None = None,
        mode: str = "hang",
        hang_s: float = 0.0,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Send the answer's events; with ``stop_at``, interrupt after that many events."""
        events = stream_events(self._build(turn, reply))
        delay = reply.chunk_delay_s if reply.chunk_delay_s is not None else self.sim.chunk_delay_s
        outcome = "reply" if stop_at is None else mode
        await turn.exchange.start_stream(outcome)
        for index, event in enumerate(events):
            if index == stop_at and not await self._interrupt(turn, mode, hang_s, error):
                return
            last = index == len(events) - 1
            if not await self._send(turn, event, delay, last):
                return

    async def _interrupt(
        self, turn: MessagesTurn, mode: str, hang_s: float, error: dict[str, Any] | None
    ) -> bool:
        """Break the stream; True when it goes on (a stall that ran out)."""
        exchange = turn.exchange
        if mode == "disconnect":
            await exchange.abort()
            return False
        if mode == "stream_error":
            await exchange.send_frame(encode(("error", error or {})), more=False)
            return False
        return await exchange.stalled(hang_s, self._closing())

    async def _send(self, turn: MessagesTurn, event: Event, delay: float, last: bool) -> bool:
        return await turn.exchange.send_paced(encode(event), delay, self._closing(), more=not last)

    def _closing(self) -> asyncio.Event:
        closing = self.sim.closing_event
        assert closing is not None  # set before the server accepts connections
        return closing


def _anthropic_shaped(error: dict[str, Any]) -> dict[str, Any]:
    """A StreamError's error in Anthropic's shape (the OpenAI default becomes an api_error)."""
    kind = error.get("type")
    if kind in (None, "server_error"):
        return {"type": "api_error", "message": str(error.get("message", "Internal server error"))}
    return {"type": str(kind), "message": str(error.get("message", ""))}
