"""The simulator's OpenAI Responses API: ``POST /v1/responses`` (streamed or not), the stored
responses (``GET``/``DELETE /v1/responses/{id}``, ``/input_items``, ``previous_response_id``),
``POST /v1/responses/input_tokens``, the window check, prompt caching and OpenAI's 400s for
broken call pairing and altered reasoning content. See README.md, "Responses API"."""

from __future__ import annotations

import hashlib
import inspect
import json
import secrets
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from .endpoints import UNPARSABLE_JSON, openai_error
from .exchange import Exchange
from .models import Behaviour, Disconnect, Fail, Hang, Received, Reply, StreamError
from .replies import default_reply
from .responses_compaction import compact_answer, compaction_item, is_compaction_request
from .responses_items import (
    Seal,
    chat_view,
    input_items,
    item_tokens,
    pairing_problems,
    prompt_units,
    seal_problems,
)
from .responses_output import (
    OutputIds,
    completed,
    output_items,
    output_tokens,
    overflow_body,
    response_object,
    usage_object,
)
from .responses_turn import ResponsesTurn, perform, send_failed_stream
from .tokens import REPLY_PRIMING_TOKENS

if TYPE_CHECKING:
    from .server import Simulator

PREFIXES = ("/v1/responses", "/responses")
CACHE_MIN_TOKENS = 1024  # OpenAI caches prompts from 1024 tokens on ...
CACHE_BLOCK_TOKENS = 128  # ... in steps of 128 tokens


def _route(path: str) -> list[str]:
    """The path after the ``/responses`` prefix, split: [] for create, [id], [id, "input_items"],
    ["input_tokens"]."""
    norm = path.rstrip("/")
    for prefix in PREFIXES:
        if norm == prefix or norm.startswith(prefix + "/"):
            return [part for part in norm[len(prefix) :].split("/") if part]
    return []


def _not_found(message: str, param: str | None = None, code: str | None = None) -> Fail:
    return Fail(404, openai_error(message, param=param, code=code))


@dataclass
class Stored:
    response: dict[str, Any]
    input: list[dict[str, Any]]  # the request's own input items, each with an id


class ResponsesAPI:
    """The Responses endpoints of one simulator (its store, cache and reasoning seal)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.seal = Seal(secrets.token_bytes(32))
        self.ids = OutputIds()
        self.cache_min_tokens = CACHE_MIN_TOKENS
        self.cache_block_tokens = CACHE_BLOCK_TOKENS
        self._lock = threading.Lock()
        self._store: dict[str, Stored] = {}
        self._cache: dict[str, list[tuple[str, int]]] = {}

    def clear(self) -> None:
        with self._lock:
            self._store.clear()
            self._cache.clear()
        self.ids = OutputIds()

    def stored(self, response_id: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._store.get(response_id)
        return entry.response if entry is not None else None

    # ------------------------------------------------------------------ reading a request
    def history(self, body: dict[str, Any]) -> list[Any] | None:
        """The full input: a previous response's input and output, then this input (None when
        previous_response_id names no stored response)."""
        previous = body.get("previous_response_id")
        items = input_items(body)
        if previous is None:
            return items
        with self._lock:
            entry = self._store.get(str(previous))
        if entry is None:
            return None
        return [*entry.input, *entry.response["output"], *items]

    def inspect(self, rec: Received) -> None:
        """Fill in a Responses request's log entry: prompt tokens, summary flag, problems."""
        body = rec.body
        if not isinstance(body, dict) or _route(rec.path) not in ([], ["compact"]):
            return
        items = self.history(body) or []
        spec = self.sim.spec_for(body.get("model"))
        units = prompt_units(body, items, self.seal)
        rec.prompt_tokens = int((sum(units) + REPLY_PRIMING_TOKENS) * spec.token_factor)
        rec.is_summary = bool(self.sim.summary_detector(chat_view(body, items)))
        rec.problems = [
            f"input[{i}]: {text}"
            for i, text in pairing_problems(items) + seal_problems(items, self.seal)
        ]

    # ------------------------------------------------------------------ routes
    async def handle(self, exchange: Exchange, parse_error: bool) -> None:
        rec = exchange.rec
        route = _route(rec.path)
        if parse_error or (rec.method == "POST" and not isinstance(rec.body, dict)):
            await exchange.send_json(400, openai_error(UNPARSABLE_JSON), outcome="bad_request")
        elif route == [] and rec.method == "POST":
            await self._create(exchange)
        elif route == ["input_tokens"] and rec.method == "POST":
            await self._input_tokens(exchange)
        elif route == ["compact"] and rec.method == "POST":
            await self._compact(exchange)
        elif len(route) == 1 and rec.method in ("GET", "DELETE"):
            await self._by_id(exchange, route[0])
        elif len(route) == 2 and route[1] == "input_items" and rec.method == "GET":
            await self._input_items(exchange, route[0])
        else:
            error = openai_error(f"Invalid URL ({rec.method} {rec.path})", code="unknown_url")
            await exchange.send_json(404, error, outcome="not_found")

    async def _by_id(self, exchange: Exchange, response_id: str) -> None:
        with self._lock:
            entry = self._store.get(response_id)
            if entry is not None and exchange.rec.method == "DELETE":
                del self._store[response_id]
        if entry is None:
            fail = _not_found(f"Response with id '{response_id}' not found.")
            await exchange.send_fail(fail, outcome="not_found")
        elif exchange.rec.method == "DELETE":
            gone = {"id": response_id, "object": "response", "deleted": True}
            await exchange.send_json(200, gone, outcome="reply")
        else:
            await exchange.send_json(200, entry.response, outcome="reply")

    async def _input_items(self, exchange: Exchange, response_id: str) -> None:
        with self._lock:
            entry = self._store.get(response_id)
        if entry is None:
            fail = _not_found(f"Response with id '{response_id}' not found.")
            await exchange.send_fail(fail, outcome="not_found")
            return
        query = parse_qs(exchange.scope.get("query_string", b"").decode())
        data = list(entry.input)
        if query.get("order", ["desc"])[0] != "asc":  # OpenAI lists newest first by default
            data.reverse()
        page = {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": False,
        }
        await exchange.send_json(200, page, outcome="reply")

    async def _input_tokens(self, exchange: Exchange) -> None:
        body: dict[str, Any] = exchange.rec.body
        items = self.history(body)
        if items is None:
            await exchange.send_fail(self._unknown_previous(body), outcome="not_found")
            return
        spec = self.sim.spec_for(body.get("model"))
        units = prompt_units(body, items, self.seal)
        count = int((sum(units) + REPLY_PRIMING_TOKENS) * spec.token_factor)
        answer = {"object": "response.input_tokens", "input_tokens": count}
        await exchange.send_json(200, answer, outcome="reply")

    async def _compact(self, exchange: Exchange) -> None:
        body: dict[str, Any] = exchange.rec.body
        items = self.history(body)
        rejection = self._rejection(body, items)
        if rejection is not None:
            await exchange.send_fail(rejection, outcome="invalid_input")
            return
        assert items is not None
        prompt = exchange.rec.prompt_tokens or 0
        if self._overflows(body, prompt):
            await exchange.send_fail(Fail(400, overflow_body()), outcome="overflow")
            return
        answer = compact_answer(body, items, self.ids, self.seal, usage_object(prompt, 0, 0, 0))
        output = answer["output"][-1]
        answer["usage"] = usage_object(prompt, 0, item_tokens(output, self.seal), 0)
        await exchange.send_json(200, answer, outcome="reply")

    @staticmethod
    def _unknown_previous(body: dict[str, Any]) -> Fail:
        previous = body.get("previous_response_id")
        return _not_found(
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )

    # ------------------------------------------------------------------ create
    def _rejection(self, body: dict[str, Any], items: list[Any] | None) -> Fail | None:
        if "model" not in body:
            error = openai_error(
                "Missing required parameter: 'model'.",
                param="model",
                code="missing_required_parameter",
            )
            return Fail(400, error)
        if items is None:
            return self._unknown_previous(body)
        sealed = seal_problems(items, self.seal)
        if sealed:
            return Fail(400, openai_error(sealed[0][1], code="invalid_encrypted_content"))
        paired = pairing_problems(items)
        if paired:
            return Fail(400, openai_error(paired[0][1], param="input"))
        return None

    def _overflows(self, body: dict[str, Any], prompt: int) -> bool:
        spec = self.sim.spec_for(body.get("model"))
        asked = body.get("max_output_tokens")
        budget = asked if isinstance(asked, int) else spec.default_max_tokens
        return prompt + (budget if spec.counts_max_tokens else 0) > spec.window

    async def _create(self, exchange: Exchange) -> None:
        rec = exchange.rec
        body: dict[str, Any] = rec.body
        items = self.history(body)
        rejection = self._rejection(body, items)
        if rejection is not None:
            outcome = "not_found" if rejection.status == 404 else "invalid_input"
            await exchange.send_fail(rejection, outcome=outcome)
            return
        assert items is not None
        response = response_object(self.ids.next("resp"), body)
        stream = body.get("stream") is True
        if self._overflows(body, rec.prompt_tokens or 0):
            spec = self.sim.spec_for(body.get("model"))
            if stream and spec.stream_errors == "event":
                await send_failed_stream(exchange, response, overflow_body())
            else:
                await exchange.send_fail(Fail(400, overflow_body()), outcome="overflow")
            return
        cached = self._cached_tokens(rec, body, items)
        try:
            behaviour = self._scripted() or await self._respond(body, items)
        except Exception as exc:
            error = openai_error(f"simulator responder raised {exc!r}", "server_error")
            await exchange.send_json(500, error, outcome="responder_error")
            return

        def finish(reply: Reply) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            return self._finish(reply, rec, body, items, response, cached)

        assert self.sim._closing is not None  # set before the server accepts connections
        turn = ResponsesTurn(
            exchange=exchange,
            stream=stream,
            response=response,
            finish=finish,
            respond=lambda: self._respond(body, items),
            closing=self.sim._closing,
            chunk_delay_s=self.sim.chunk_delay_s,
        )
        await perform(behaviour, turn)

    def _scripted(self) -> Behaviour | None:
        with self.sim._lock:
            return self.sim._queue.popleft() if self.sim._queue else None

    async def _respond(self, body: dict[str, Any], items: list[Any]) -> Behaviour:
        """The responder's behaviour for the Responses body, else the default reply to its
        chat-shaped view."""
        responder = self.sim.responder
        if responder is not None:
            result = responder(body)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, str):
                return Reply(content=result)
            if isinstance(result, Reply | Fail | Hang | Disconnect | StreamError):
                return result
            if result is not None:
                raise TypeError(f"responder returned {result!r}")
        return default_reply(chat_view(body, items))

    def _finish(
        self,
        reply: Reply,
        rec: Received,
        body: dict[str, Any],
        items: list[Any],
        response: dict[str, Any],
        cached: int,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        include = body.get("include")
        encrypted = isinstance(include, list) and "reasoning.encrypted_content" in include
        if is_compaction_request(items):
            out = [compaction_item(items[:-1], self.ids, self.seal)]
        else:
            out = output_items(reply, self.ids, self.sim._next_call_id, self.seal, encrypted)
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else rec.prompt_tokens
        spent, reasoning = output_tokens(reply, out)
        spec = self.sim.spec_for(body.get("model"))
        usage = usage_object(prompt or 0, min(cached, prompt or 0), spent, reasoning)
        final = completed(response, out, usage if spec.usage else None)
        if body.get("store", True) is not False:
            own = [self._with_id(item) for item in input_items(body)]
            with self._lock:
                self._store[response["id"]] = Stored(response=final, input=own)
        return out, final

    def _with_id(self, item: Any) -> dict[str, Any]:
        """An input item as input_items lists it: with an id, a message's text as parts."""
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            return item
        base = dict(item) if isinstance(item, dict) else {"type": "message", "content": item}
        if base.get("type", "message") == "message" and isinstance(base.get("content"), str):
            base = {**base, "type": "message", "status": "completed"}
            base["content"] = [{"type": "input_text", "text": base["content"]}]
        return {"id": self.ids.next("msg"), **base}

    # ------------------------------------------------------------------ prompt caching
    def _cached_tokens(self, rec: Received, body: dict[str, Any], items: list[Any]) -> int:
        """Tokens of the longest leading run of prompt units (tools + instructions, then items)
        equal to the previous request's with the same cache key, in 128-token steps from 1024
        (OpenAI's rule); then this prompt becomes the key's cached one."""
        key = str(
            body.get("prompt_cache_key")
            or rec.headers.get("session-id")
            or f"model:{body.get('model')}"
        )
        fixed = {k: body.get(k) for k in ("tools", "instructions")}
        units = [
            (_digest(unit), tokens)
            for unit, tokens in zip(
                [fixed, *items], prompt_units(body, items, self.seal), strict=True
            )
        ]
        with self._lock:
            previous = self._cache.get(key, [])
            self._cache[key] = units
        shared = 0
        for (digest, tokens), (old, _) in zip(units, previous, strict=False):
            if digest != old:
                break
            shared += tokens
        factor = self.sim.spec_for(body.get("model")).token_factor
        shared = int(shared * factor)
        if shared < self.cache_min_tokens:
            return 0
        return shared - shared % self.cache_block_tokens


def _digest(unit: Any) -> str:
    data = json.dumps(unit, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(data).hexdigest()
