"""The Gemini API dialect of the simulator, under ``/v1beta`` (``sim.gemini_url``):

    POST models/{m}:generateContent         an answer (``GenerateContentResponse``)
    POST models/{m}:streamGenerateContent   the same as SSE chunks (``alt=sse``)
    POST models/{m}:countTokens             ``{"totalTokens": N}`` (404 with
                                            ``count_tokens_enabled = False``)
    GET  models, models/{m}                 the configured models, Google's shape

Requests are checked like the real API checks them (``gemini_rules``: pairing, thought
signatures), overflow with Google's error (``The input token count (P) exceeds the maximum
number of tokens allowed (N).``, as a 400 or, with ``stream_errors="event"``, as the stream's
one chunk), billed with implicit prefix caching (``cachedContentTokenCount``), and answered
from the simulator's behaviour queue or responder, which see the body in chat shape.
The key is ``x-goog-api-key`` or ``?key=``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from .exchange import Exchange
from .gemini_rules import request_problems
from .gemini_wire import (
    Signer,
    chat_body,
    finish_reason,
    google_error,
    reply_parts,
    response_object,
    sse,
    stream_chunks,
    thinking_requested,
)
from .models import Behaviour, Disconnect, Fail, Hang, ModelSpec, Received, Reply, StreamError
from .replies import default_reply
from .tokens import count_prompt_tokens, count_text

if TYPE_CHECKING:
    from .server import Simulator

PREFIX = "/v1beta/"
_ACTION = re.compile(r"^/v1beta/models/([^/:]+):([A-Za-z]+)$")
_MODEL = re.compile(r"^/v1beta/models/([^/:]+)$")
_CACHE_KEPT = 16  # earlier prompts remembered for implicit caching


def is_gemini_path(norm: str) -> bool:
    return norm.startswith(PREFIX) or norm == PREFIX.rstrip("/")


def action_of(path: str) -> tuple[str, str] | None:
    found = _ACTION.match(path.rstrip("/"))
    return (found.group(1), found.group(2)) if found else None


@dataclass
class GeminiTurn:
    exchange: Exchange
    body: dict[str, Any]
    chat: dict[str, Any]
    spec: ModelSpec
    model: str
    stream: bool

    @property
    def rec(self) -> Received:
        return self.exchange.rec


class GeminiAPI:
    """The simulator's Gemini side; one per simulator (``sim.gemini``).

    count_tokens_enabled  False: ``:countTokens`` answers 404 (like a provider lacking it)
    require_signatures    check thought signatures as Gemini 3 does (presence in the current
                          turn, integrity everywhere)
    call_ids              give each ``functionCall`` an ``id`` (the reply's, or ``call_<n>``)
    signer                issues and checks thought signatures
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.count_tokens_enabled = True
        self.require_signatures = True
        self.call_ids = True
        self.signer = Signer()
        self._ids = itertools.count(1)
        self._prompts: deque[tuple[str, list[str], int]] = deque(maxlen=_CACHE_KEPT)
        self.queries: list[str] = []  # each request's query string, in arrival order

    def reset(self) -> None:
        self._ids = itertools.count(1)
        self._prompts.clear()
        self.queries.clear()

    # ------------------------------------------------------------------ log
    def inspect(self, rec: Received) -> None:
        """Fill a logged generate request's token count, summary flag and rule problems."""
        found = action_of(rec.path)
        if found is None or not isinstance(rec.body, dict):
            return
        model, _ = found
        chat = chat_body(rec.body, model)
        rec.prompt_tokens = count_prompt_tokens(chat, self.sim.spec_for(model).token_factor)
        rec.is_summary = bool(self.sim.summary_detector(chat))
        rec.problems = request_problems(rec.body, self.signer, self.require_signatures)

    # ------------------------------------------------------------------ routing
    async def handle(self, exchange: Exchange) -> None:
        rec = exchange.rec
        norm = rec.path.rstrip("/")
        self.queries.append(exchange.scope.get("query_string", b"").decode("latin-1"))
        refusal = self._key_refusal(exchange)
        if refusal is not None:
            await exchange.send_json(refusal[0], refusal[1], outcome="unauthorized")
            return
        if rec.method == "GET":
            await self._models(exchange, norm)
            return
        found = action_of(norm)
        if rec.method != "POST" or found is None:
            await self._not_found(exchange, norm)
            return
        model, action = found
        if action == "countTokens":
            await self._count_tokens(exchange, model)
        elif action in ("generateContent", "streamGenerateContent"):
            await self._generate(exchange, model, action == "streamGenerateContent")
        else:
            await self._not_found(exchange, norm)

    def _key_refusal(self, exchange: Exchange) -> tuple[int, Any] | None:
        required = self.sim.required_api_key
        if required is None:
            return None
        query = parse_qs(exchange.scope.get("query_string", b"").decode("latin-1"))
        key = exchange.rec.headers.get("x-goog-api-key") or (query.get("key") or [None])[0]
        if key == required:
            return None
        if not key:
            message = (
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API."
            )
            return 403, google_error(403, message, "PERMISSION_DENIED")
        message = "API key not valid. Please pass a valid API key."
        return 400, google_error(400, message, "INVALID_ARGUMENT")

    async def _not_found(self, exchange: Exchange, norm: str) -> None:
        error = google_error(404, f"Method not found: {norm}", "NOT_FOUND")
        await exchange.send_json(404, error, outcome="not_found")

    async def _models(self, exchange: Exchange, norm: str) -> None:
        found = _MODEL.match(norm)
        if norm == "/v1beta/models":
            data = [_model_entry(n, s) for n, s in self.sim.models.items()]
            await exchange.send_json(200, {"models": data}, outcome="reply")
        elif found and found.group(1) in self.sim.models:
            name = found.group(1)
            await exchange.send_json(200, _model_entry(name, self.sim.models[name]), "reply")
        elif found:
            error = google_error(404, f"models/{found.group(1)} is not found", "NOT_FOUND")
            await exchange.send_json(404, error, outcome="not_found")
        else:
            await self._not_found(exchange, norm)

    async def _count_tokens(self, exchange: Exchange, model: str) -> None:
        rec = exchange.rec
        if not self.count_tokens_enabled:
            await self._not_found(exchange, rec.path)
            return
        body = rec.body if isinstance(rec.body, dict) else {}
        inner = body.get("generateContentRequest")
        chat = chat_body(inner if isinstance(inner, dict) else body, model)
        tokens = count_prompt_tokens(chat, self.sim.spec_for(model).token_factor)
        await exchange.send_json(200, {"totalTokens": tokens}, outcome="reply")

    # ------------------------------------------------------------------ answering
    async def _generate(self, exchange: Exchange, model: str, stream: bool) -> None:
        rec = exchange.rec
        if not isinstance(rec.body, dict):
            error = google_error(400, "Invalid JSON payload received.", "INVALID_ARGUMENT")
            await exchange.send_json(400, error, outcome="bad_request")
            return
        problems = request_problems(rec.body, self.signer, self.require_signatures)
        if problems:
            error = google_error(400, problems[0], "INVALID_ARGUMENT")
            await exchange.send_json(400, error, outcome="invalid_messages")
            return
        spec = self.sim.spec_for(model)
        turn = GeminiTurn(exchange, rec.body, chat_body(rec.body, model), spec, model, stream)
        prompt = rec.prompt_tokens or 0
        if prompt > spec.window:
            message = (
                f"The input token count ({prompt}) exceeds the maximum number of tokens "
                f"allowed ({spec.window})."
            )
            error = google_error(400, message, "INVALID_ARGUMENT")
            if stream and spec.stream_errors == "event":
                await exchange.start_stream("overflow")
                await exchange.send_frame(sse(error), more=False)
            else:
                await exchange.send_json(400, error, outcome="overflow")
            return
        try:
            behaviour = await self.sim.behaviour_for(turn.chat)
        except Exception as exc:
            logging.getLogger(__name__).exception("simulator responder failed")
            error = google_error(500, f"simulator responder raised {exc!r}", "INTERNAL")
            await exchange.send_json(500, error, outcome="responder_error")
            return
        await self._perform(behaviour, turn)

    async def _perform(self, behaviour: Behaviour, turn: GeminiTurn) -> None:
        exchange = turn.exchange
        if isinstance(behaviour, Fail):
            await exchange.send_fail(behaviour, outcome="fail")
        elif isinstance(behaviour, Hang):
            if not await exchange.held(behaviour.seconds, self._closing()):
                return
            then = behaviour.then or default_reply(turn.chat)
            await self._perform(then, turn)
        elif isinstance(behaviour, Disconnect):
            turn.rec.outcome = "disconnect"
            if turn.stream and behaviour.after_chunks:
                reply = behaviour.reply or default_reply(turn.chat)
                await self._stream(turn, reply, stop_at=behaviour.after_chunks)
            await exchange.abort()
        elif isinstance(behaviour, StreamError):
            error = google_error(500, str(behaviour.error.get("message", "")), "INTERNAL")
            if not turn.stream:
                await exchange.send_json(500, error, outcome="stream_error")
                return
            reply = behaviour.reply or default_reply(turn.chat)
            await self._stream(turn, reply, stop_at=behaviour.after_chunks, error=error)
        else:
            await self._reply(behaviour, turn)

    async def _reply(self, reply: Reply, turn: GeminiTurn) -> None:
        if turn.stream:
            await self._stream(turn, reply)
            return
        parts, usage = self._answer(reply, turn)
        answer = response_object(parts, finish_reason(reply), usage, turn.model, self._id())
        await turn.exchange.send_json(200, answer, outcome="reply")

    def _answer(
        self, reply: Reply, turn: GeminiTurn
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        calls = [dict(c) for c in reply.tool_calls or []]
        for call in calls:
            if self.call_ids and not call.get("id"):
                call["id"] = self.sim._next_call_id()
        reply = Reply(
            content=reply.content,
            tool_calls=calls or None,
            finish_reason=reply.finish_reason,
            completion_tokens=reply.completion_tokens,
            prompt_tokens=reply.prompt_tokens,
            reasoning_content=reply.reasoning_content,
            chunk_delay_s=reply.chunk_delay_s,
        )
        thinking = thinking_requested(turn.body)
        parts = reply_parts(reply, thinking, self.signer, self.call_ids)
        usage = self._usage(reply, turn, parts)
        turn.rec.usage = usage
        return parts, usage

    def _usage(self, reply: Reply, turn: GeminiTurn, parts: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else turn.rec.prompt_tokens
        prompt = prompt or 0
        visible = [p for p in parts if not p.get("thought")]
        output = reply.completion_tokens
        if output is None:
            output = count_text(
                json.dumps(
                    [{k: v for k, v in p.items() if k != "thoughtSignature"} for p in visible]
                )
            )
        thoughts = sum(count_text(p["text"]) for p in parts if p.get("thought"))
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output + thoughts,
        }
        if thoughts:
            usage["thoughtsTokenCount"] = thoughts
        cached = min(self._cached(turn), prompt)
        if cached:
            usage["cachedContentTokenCount"] = cached
        return usage

    def _cached(self, turn: GeminiTurn) -> int:
        """Implicit caching: the tokens of the longest run of leading contents (with the same
        system instruction and tools) an earlier request of this model sent."""
        body = turn.body
        head = json.dumps([body.get("systemInstruction"), body.get("tools")], sort_keys=True)
        hashes = [
            hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest()
            for c in body.get("contents") or []
        ]
        key = turn.model + hashlib.sha256(head.encode()).hexdigest()
        best = 0
        for earlier_key, earlier, _ in self._prompts:
            if earlier_key != key:
                continue
            common = 0
            for a, b in zip(earlier, hashes, strict=False):
                if a != b:
                    break
                common += 1
            best = max(best, common)
        self._prompts.append((key, hashes, 0))
        if not best:
            return 0
        prefix = {**body, "contents": (body.get("contents") or [])[:best]}
        tokens = count_prompt_tokens(chat_body(prefix, turn.model), turn.spec.token_factor)
        return tokens if tokens >= turn.spec.cache_min_tokens else 0

    async def _stream(
        self,
        turn: GeminiTurn,
        reply: Reply,
        *,
        stop_at: int | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        parts, usage = self._answer(reply, turn)
        chunks = stream_chunks(parts, finish_reason(reply), usage, turn.model, self._id())
        delay = reply.chunk_delay_s if reply.chunk_delay_s is not None else self.sim.chunk_delay_s
        exchange = turn.exchange
        await exchange.start_stream("reply" if stop_at is None else turn.rec.outcome)
        for index, chunk in enumerate(chunks):
            if index == stop_at:
                if error is not None:
                    turn.rec.outcome = "stream_error"
                    await exchange.send_frame(sse(error), more=False)
                return
            last = index == len(chunks) - 1
            await exchange.send_frame(sse(chunk), more=not last)
            if delay > 0 and not last:
                await asyncio.sleep(delay)

    def _id(self) -> str:
        return f"simresp{next(self._ids):06d}"

    def _closing(self) -> asyncio.Event:
        closing = self.sim.closing_event
        assert closing is not None  # set before the server accepts connections
        return closing


def _model_entry(name: str, spec: ModelSpec) -> dict[str, Any]:
    return {
        "name": f"models/{name}",
        "version": "001",
        "displayName": name,
        "inputTokenLimit": spec.window,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "thinking": True,
    }
