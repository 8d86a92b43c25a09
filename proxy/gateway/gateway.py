"""The relay every front door shares: one request in, one upstream call (or a few, on
overflow) out.

    edge (routes) → door.parse → Conversations.prepare (session, checkpoint, arrival triggers)
    → door.render → upstream → door.usage / door.watch → Conversations.after_response

Non-streaming answers are relayed byte for byte. Streams are relayed as they arrive; every
recovery from an overflow happens before the first byte reaches the client, since after the
200 the status can no longer change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace

import anyio
import httpx
import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from proxy.doors.bodies import within_message_cap
from proxy.doors.registry import Door
from proxy.doors.streaming import EventStreamResponse, StreamRelay
from proxy.gateway.auth import Authenticator
from proxy.gateway.charges import Charges, upstream_headers
from proxy.gateway.earlier import EarlierBodies
from proxy.gateway.rounds import Recalled, Rounds
from proxy.gateway.switches import Switches
from proxy.provider.images import ImageLimit, image_limit, shrink_images
from proxy.provider.upstream import Upstream
from session.config.settings import ModelRule, Settings
from session.conversations import Conversations
from session.errors import (
    BadRequest,
    ProxyError,
    UpstreamStatus,
    unknown_model,
)
from session.identity import identify, scope_for
from session.ledger.book import Ledger
from session.ledger.shadow import Shadow
from session.metrics import Metrics
from session.policy import COMPRESSION_OFF
from session.ports.frontdoor import FrontDoor, StreamWatch, Usage
from session.ports.headers import client_response_headers
from session.recall.tool import Recaller
from session.turn import Turn
from storage import SessionKey, wait_budget

log = logging.getLogger("ctxgate.gateway")

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_RULES_KEPT = 4096  # distinct (model, API) pairs whose rule is remembered
_DUMPS_DEPTH = 255  # the deepest nesting orjson writes back
# Levels ctxgate's own shapes may add around a client's value when it writes one back (a
# door's original item kept in a chat message, the opening a session id is derived from).
_WRAPPING = 8


class Gateway:
    def __init__(
        self,
        settings: Settings,
        conversations: Conversations,
        auth: Authenticator,
        metrics: Metrics,
        recaller: Recaller,
        upstreams: Mapping[str, Upstream],
        ledger: Ledger | None = None,
        shadow: Shadow | None = None,
    ) -> None:
        self.settings = settings
        self.upstreams = upstreams  # the request's `turn.upstream`, able to stream
        self.conversations = conversations
        self.auth = auth
        self.metrics = metrics
        self.recaller = recaller
        self.charges = Charges(conversations, ledger, shadow)
        self.switches = Switches(conversations.store, settings.storage.session_cache_s)
        self.rounds = Rounds(recaller, metrics, self._open_stream, self.charges.round)
        self.earlier = EarlierBodies(settings.server.parsed_request_bytes)
        self._rules: dict[tuple[str, str], ModelRule] = {}  # (model, api) -> its served rule

    async def serve(self, door: Door, headers: Mapping[str, str], raw: bytes) -> Response:
        """Serve one request of `door`'s API; raises ProxyError for the error handler."""
        try:
            # All of one request's waits for session locks share one `lock_wait_s`.
            with wait_budget(self.settings.storage.lock_wait_s):
                return await self._serve(door, headers, raw)
        except orjson.JSONEncodeError as exc:
            # The parser takes deeper nesting than the serialiser: met when an id is derived
            # or the body rewritten, always before the upstream is called. orjson raises this
            # one type for every cause, so the body's depth tells the client's mistake from a
            # bug (measured only on the failure, never on the request path).
            if nesting(raw) + _WRAPPING <= _DUMPS_DEPTH:
                raise
            raise BadRequest(
                "The request body holds JSON nested deeper than ctxgate can re-serialise "
                f"({_DUMPS_DEPTH} levels)."
            ) from exc

    async def _serve(self, door: Door, headers: Mapping[str, str], raw: bytes) -> Response:
        arrived = time.perf_counter()
        credential = self.auth.client_credential(headers)
        cap = self.settings.server.max_messages
        request = door.parse(raw, self.earlier.of(door), max_messages=cap)
        # A door whose messages are not its body's array counts them once converted.
        within_message_cap(len(request.messages), cap)
        rule = self._rule(request.model, door.api)
        ident = identify(headers, request.session_hint, request.messages, scope_for(credential))
        forward = self.auth.forwardable(headers)
        client_session = SessionKey(ident.scope, ident.session_id)
        off = await self.switches.compression_off(client_session, headers)
        turn = await self.conversations.prepare(door, ident, request, rule, forward, off)
        if not off:  # relayed verbatim: no recall tool either
            turn = self.recaller.offer(await self.recaller.ahead(turn))
        self.metrics.prepared(turn, time.perf_counter() - arrived)
        if self.settings.logging.log_content:
            log.info(
                "session %s forwards %d messages: %s",
                turn.key.key,
                len(turn.view),
                orjson.dumps(turn.view).decode(),
            )
        try:
            if request.stream:
                return await self._stream(turn)
            return await self._complete(turn)
        except ProxyError as exc:
            exc.session_headers = turn.response_headers()
            raise

    def _rule(self, model: str, api: str) -> ModelRule:
        """`served_rule`, remembered for the models seen: matching globs on every request
        costs more than the lookup (a cold `fnmatch` and `re` on each)."""
        rule = self._rules.get((model, api))
        if rule is None:
            rule = served_rule(self.settings, model, api)
            if len(self._rules) < _RULES_KEPT:
                self._rules[model, api] = rule
        return rule

    async def _recover_or_raise(
        self, turn: Turn, error: UpstreamStatus, attempt: int, body_bytes: int
    ) -> Turn:
        """The turn to retry with; otherwise raise the upstream's error with a reason."""
        limit = image_limit(error.status_code, error.raw)
        if limit is not None:
            if turn.compression_off:  # relayed verbatim: its images are the client's
                raise _with_reason(error, COMPRESSION_OFF)
            return _with_images_shrunk(turn, error, limit)
        overflow = turn.door.overflow(error.status_code, error.raw)
        if overflow is None:
            raise error
        self.metrics.overflow()
        log.info(
            "session %s: the upstream answered %d, over the model's window; compressing to retry",
            turn.key.key,
            error.status_code,
        )
        turn, reason = await self.conversations.recover(turn, overflow, attempt, body_bytes)
        if reason is not None:
            raise _with_reason(error, reason)
        return turn

    async def _complete(self, turn: Turn) -> Response:
        headers = upstream_headers(turn)
        attempt = 0
        while True:
            body = turn.upstream_body()
            sent = time.perf_counter()
            response = await turn.upstream.call("POST", turn.door.upstream_path, body, headers)
            self.metrics.upstream_done(turn, sent, response.status_code)
            if response.status_code < 400:
                break
            error = UpstreamStatus(
                response.status_code,
                response.content,
                client_response_headers(response.headers.items()),
            )
            turn = await self._recover_or_raise(turn, error, attempt, len(body))
            attempt += 1
        # The session's figures are the first answer's: its prompt is the view the session
        # holds; a recall round's prompt also holds the exchange the client never sees.
        measured, first = turn, response.content
        content, recall = first, Recalled(turn)
        if turn.tools:
            turn, response, content, recall = await self.rounds.complete(turn, response, headers)
        out_headers = client_response_headers(response.headers.items())
        out_headers.update(turn.response_headers())
        out_headers.pop("content-type", None)
        out_headers.pop("content-length", None)
        usage = measured.door.usage(first)
        self._account(measured, usage)
        return Response(
            content,
            status_code=response.status_code,
            headers=out_headers,
            media_type=response.headers.get("content-type", "application/json"),
            # Keeping the parsed body, the charge and recall's figures follow once the client has
            # its answer.
            background=BackgroundTask(self._answered, measured, usage, recall, content),
        )

    async def _answered(
        self, turn: Turn, usage: Usage | None, recall: Recalled, shown: bytes
    ) -> None:
        self.earlier.settle()
        await self.recaller.record(turn, recall.turn, recall.hidden, recall.seconds)
        await self.charges.request(turn, usage, shown)

    def _account(self, turn: Turn, usage: Usage | None) -> None:
        """A whole answer's session bookkeeping, done before it goes out, as a stream's is
        before its end: its usage is journaled, so a process killed once the client has the
        answer loses no record."""
        try:
            self.conversations.after_response(turn, usage)
        except Exception:  # the client still gets its answer; the log says what failed
            log.exception("session bookkeeping after a response failed")
        self.metrics.finished(200)

    async def _open_stream(
        self, turn: Turn, stack: AsyncExitStack, recover: bool = True
    ) -> tuple[Turn, httpx.Response, StreamRelay]:
        """The upstream's stream, opened and checked up to its first event.

        Providers may put an overflow error in the stream after their 200; seen before
        anything reached the client, it is recovered from like the same error as a status
        (unless `recover` is off: the error is raised).
        """
        headers = upstream_headers(turn)
        attempt = 0
        while True:
            body = turn.upstream_body()
            sent = time.perf_counter()
            call = AsyncExitStack()
            response: httpx.Response | None = None
            try:
                response = await call.enter_async_context(
                    self.upstreams[turn.rule.upstream].open_stream(
                        turn.door.upstream_path, body, headers
                    )
                )
                self.metrics.upstream_done(turn, sent, response.status_code)
                relay = StreamRelay(response, turn.door.watch(turn.request))
                _raise_overflow_event(turn.door, await relay.first_event(), response)
            except UpstreamStatus as error:
                await call.aclose()
                if response is None:  # a status, not an event in the stream
                    self.metrics.upstream_done(turn, sent, error.status_code)
                if not recover:
                    raise
                turn = await self._recover_or_raise(turn, error, attempt, len(body))
                attempt += 1
                continue
            except BaseException:
                await call.aclose()
                raise
            stack.push_async_exit(call)
            return turn, response, relay

    async def _stream(self, turn: Turn) -> Response:
        stack = AsyncExitStack()
        try:
            turn, response, relay = await self._open_stream(turn, stack)
            measured = Measured(turn, relay.watch)
            held: list[bytes] = []
            started = time.perf_counter()
            if turn.tools:
                turn, response, relay, held = await self.rounds.stream(turn, response, relay, stack)
            recall = Recalled(turn, False, time.perf_counter() - started)
        except BaseException:
            await stack.aclose()
            raise
        out_headers = client_response_headers(response.headers.items())
        out_headers.pop("content-type", None)
        out_headers.update(_SSE_HEADERS)
        out_headers.update(turn.response_headers())
        self.conversations.sessions.answering(measured.turn.root)
        return EventStreamResponse(
            self._relay(measured, recall, relay, stack, relay.filtered(held)),
            response.status_code,
            out_headers,
        )

    async def _relay(
        self,
        measured: Measured,
        recall: Recalled,
        relay: StreamRelay,
        stack: AsyncExitStack,
        held: bytes,
    ) -> AsyncIterator[bytes]:
        completed = False
        try:
            if held:
                yield held
            async for chunk in relay.events():
                yield chunk
            completed = True
        finally:
            # Runs on a client disconnect too, as the cancellation passes through: shielded,
            # the cleanup really closes the upstream connection (which cancels the generation).
            with anyio.CancelScope(shield=True):
                await stack.aclose()
                self.earlier.settle()
                if completed and relay.watch.failed is None:
                    self.conversations.after_response(measured.turn, measured.watch.usage)
                self.conversations.sessions.answered(measured.turn.root)
                self.metrics.finished(200 if relay.watch.failed is None else 502)
                if relay.watch.failed is not None:
                    log.info("session %s: %s", measured.turn.key.key, relay.watch.failed)
                hidden = relay.filter is not None and relay.filter.hid
                if hidden:
                    self.metrics.recall_hidden.inc()
                # Charged whenever the provider reported usage (it bills a stream the client
                # left early too), beside the request: a client gone cancels this task even
                # through the shield. Checked only when the answer reached its normal end.
                whole = relay.watch.finished and relay.watch.failed is None
                charge = self.charges.request(
                    measured.turn, measured.watch.usage, None, check=whole
                )
                self.conversations.sessions.spawn(charge)
                if relay.watch is not measured.watch:  # the client's round was a recall round
                    await self.charges.round(measured.turn, relay.watch.usage)
                await self.recaller.record(measured.turn, recall.turn, hidden, recall.seconds)


@dataclass(frozen=True, slots=True)
class Measured:
    """The round whose usage the session records: the first, whose prompt is the session's
    view (later recall rounds add an exchange the client never sees)."""

    turn: Turn
    watch: StreamWatch


def served_rule(settings: Settings, model: str, api: str) -> ModelRule:
    """The model's rule, when its upstream serves `api`; when only one upstream serves `api`,
    the rule sent there (the API a client speaks names its provider better than a model name
    another provider may share); else the error that says why not."""
    rule = settings.rule_for(model)
    if rule is None:
        raise unknown_model(model)
    served = settings.upstreams[rule.upstream].apis
    serving = [name for name, upstream in settings.upstreams.items() if api in upstream.apis]
    if api not in served and len(serving) == 1:
        return replace(rule, upstream=serving[0])
    if api not in served:
        raise BadRequest(
            f"The model '{model}' is served by the upstream '{rule.upstream}', "
            f"whose `upstreams.{rule.upstream}.apis` ({', '.join(served)}) does not list "
            f"'{api}'; add it there if the provider serves that API.",
            param="model",
            code="api_not_served",
        )
    return rule


def _with_images_shrunk(turn: Turn, error: UpstreamStatus, limit: ImageLimit) -> Turn:
    """The turn with its inline images shrunk to `limit`: one retry, never a second."""
    if turn.images_shrunk:
        raise _with_reason(error, "the images were already shrunk once")
    view = shrink_images(turn.view, limit)
    if view is None:
        raise _with_reason(error, "no inline image could be made smaller")
    log.info("session %s: images shrunk to %s after the provider refused them", turn.key.key, limit)
    return replace(turn, view=view, images_shrunk=True)


def _raise_overflow_event(door: FrontDoor, data: bytes | None, response: httpx.Response) -> None:
    """Raise the stream's first event as an `UpstreamStatus` when it reports an error ctxgate
    recovers from (an overflow, an image too large)."""
    if not data:
        return
    status = door.stream_error(data)
    if status is None:
        return
    if door.overflow(status, data) is None and image_limit(status, data) is None:
        return
    data = _error_envelope(data)
    raise UpstreamStatus(status, data, client_response_headers(response.headers.items()))


def _error_envelope(data: bytes) -> bytes:
    """An in-stream error event as an error body: a Responses `response.failed` event carries
    its error inside the response object, where a client reading a status would not look."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    if not isinstance(parsed, dict) or "error" in parsed:
        return data
    inner = parsed.get("response")
    error = inner.get("error") if isinstance(inner, dict) else None
    return orjson.dumps({"error": error}) if isinstance(error, dict) else data


def _with_reason(error: UpstreamStatus, reason: str) -> UpstreamStatus:
    """The upstream's own error, its message extended with why ctxgate could not recover."""
    try:
        data = orjson.loads(error.raw)
    except orjson.JSONDecodeError:
        data = None
    note = f" [ctxgate: not recoverable: {reason}]"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        data["error"]["message"] = str(data["error"].get("message") or "") + note
        raw = orjson.dumps(data)
    elif isinstance(data, dict) and isinstance(data.get("error"), str):
        data["error"] = data["error"] + note
        raw = orjson.dumps(data)
    else:
        raw = error.raw
    headers = dict(error.raw_headers)
    headers["x-ctxgate-error"] = reason[:200]
    return UpstreamStatus(error.status_code, raw, headers)


def nesting(raw: bytes) -> int:
    """How deep the JSON document `raw` nests (0 for a scalar or for bytes that are no JSON),
    walked without recursion."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return 0
    deepest, stack = 0, [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        elif not isinstance(value, list):
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((item, depth + 1) for item in value)
    return deepest
