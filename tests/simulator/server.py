"""The provider simulator: a real uvicorn server on loopback, in a background thread."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .dialects import overflow_error, tool_pairing_problems
from .models import Behaviour, Disconnect, Fail, Hang, ModelSpec, Received, Reply, StreamError
from .replies import chat_completion, default_reply, is_summary_request, normalize_tool_calls
from .sse import DONE, encode_event, stream_chunks
from .tokens import count_prompt_tokens, get_encoding

Responder = Callable[[dict[str, Any]], Any]

TRANSPORT_KEY = "ctxgate.simulator.transport"
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODELS_PATHS = ("/v1/models", "/models")
DEFAULT_WINDOW = 128_000
_UNPARSABLE_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
    "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
    "valid JSON. If you have trouble figuring out how to fix this, please contact us through our "
    "help center at help.openai.com.)"
)


class _AbruptClose(Exception):
    """Raised inside the ASGI app to make uvicorn drop the connection (fallback when the
    transport is not reachable)."""


class _QuietAbruptClose(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _AbruptClose)


logging.getLogger("uvicorn.error").addFilter(_QuietAbruptClose())


class _SimH11Protocol(H11Protocol):
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


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode()


def _openai_error(
    message: str, type_: str = "invalid_request_error", param: Any = None, code: Any = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _mask_key(key: str) -> str:
    return key[:3] + "*" * 4 + key[-4:] if len(key) > 8 else "*" * len(key)


class Simulator:
    """An OpenAI-compatible provider for tests (see README.md in this package)."""

    def __init__(
        self,
        models: dict[str, ModelSpec | int] | None = None,
        default: ModelSpec | None = None,
        *,
        required_api_key: str | None = None,
        chunk_delay_s: float = 0.0,
        validate_messages: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.models: dict[str, ModelSpec] = {
            name: spec if isinstance(spec, ModelSpec) else ModelSpec(window=int(spec))
            for name, spec in (models or {}).items()
        }
        self.default = default if default is not None else ModelSpec(window=DEFAULT_WINDOW)
        self.required_api_key = required_api_key
        self.chunk_delay_s = chunk_delay_s
        self.validate_messages = validate_messages
        self.responder: Responder | None = None
        self.summary_detector: Callable[[Any], bool] = is_summary_request
        self.on_request: Callable[[Received], None] | None = None
        self.host = host
        self._port = port

        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._queue: deque[Behaviour] = deque()
        self._completion_ids = itertools.count(1)
        self._call_ids = itertools.count(1)

        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._thread_error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Simulator:
        """Start serving on ``host`` (a free port unless one was given); returns when ready."""
        if self._thread is not None:
            return self
        get_encoding()  # load the tokenizer before the first request (and fail early)
        # proto=IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP
        # (without it every response stalls ~40 ms on Nagle + delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self._port))
        except OSError:
            sock.close()
            raise
        self._port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(
            self._app,
            interface="asgi3",
            http=_SimH11Protocol,
            proxy_headers=False,
            ws="none",
            lifespan="off",
            loop="asyncio",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread_error = None
        self._thread = threading.Thread(
            target=self._run, name=f"provider-simulator-{self._port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                err = self._thread_error
                self.stop()
                raise RuntimeError(f"provider simulator failed to start: {err!r}")
            time.sleep(0.002)
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._thread_error = exc

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        server, sock = self._server, self._sock
        assert server is not None and sock is not None
        # Server.serve() polls should_exit every 0.1 s and sleeps 0.1 s in shutdown(); driving
        # startup and a lean shutdown ourselves makes stop() take milliseconds.
        config = server.config
        if not config.loaded:
            config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        await self._closing.wait()
        for listener in server.servers:
            listener.close()
        state = server.server_state
        for connection in list(state.connections):
            connection.shutdown()  # idle keep-alive connections close now; hung ones abort
        deadline = time.monotonic() + 2.0
        while (state.connections or state.tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        for task in list(state.tasks):
            task.cancel()
        for listener in server.servers:
            await listener.wait_closed()
        sock.close()

    def stop(self) -> None:
        """Shut the server down (hung requests are released, their connections dropped)."""
        thread, loop, closing = self._thread, self._loop, self._closing
        if thread is None:
            return
        if loop is not None and closing is not None:
            try:
                loop.call_soon_threadsafe(closing.set)
            except RuntimeError:  # loop already closed
                pass
        thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
        if thread.is_alive():
            raise RuntimeError("provider simulator thread did not stop")
        self._thread = self._server = self._sock = None
        self._loop = self._closing = None

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # ------------------------------------------------------------------ scripting & log
    def enqueue(self, *behaviours: Behaviour) -> None:
        """Script the next chat requests, one behaviour each, FIFO (overflow and auth
        errors are decided before, and do not consume the queue)."""
        for b in behaviours:
            if not isinstance(b, Reply | Fail | Hang | Disconnect | StreamError):
                raise TypeError(f"cannot enqueue {b!r}")
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        """Forget the received log and queued scripts, restart the id counters (models, responder
        and settings stay)."""
        with self._lock:
            self._received.clear()
            self._queue.clear()
            self._completion_ids = itertools.count(1)
            self._call_ids = itertools.count(1)

    @property
    def received(self) -> list[Received]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._received)

    @property
    def chat_requests(self) -> list[Received]:
        return [r for r in self.received if r.is_chat]

    @property
    def summary_requests(self) -> list[Received]:
        return [r for r in self.received if r.is_summary]

    def wait_for(
        self,
        count: int = 1,
        timeout: float = 5.0,
        predicate: Callable[[Received], bool] | None = None,
    ) -> list[Received]:
        """Block until at least ``count`` received requests match ``predicate`` (default: chat
        requests); returns them. Raises TimeoutError otherwise."""
        pred = predicate or (lambda r: r.is_chat)
        deadline = time.monotonic() + timeout
        while True:
            hits = [r for r in self.received if pred(r)]
            if len(hits) >= count:
                return hits
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {count} matching requests, got {len(hits)}")
            time.sleep(0.005)

    def spec_for(self, model: Any) -> ModelSpec:
        if isinstance(model, str) and model in self.models:
            return self.models[model]
        return self.default

    def count_prompt_tokens(self, body: dict[str, Any]) -> int:
        """The simulator's own "real" prompt token count of a request (token_factor applied)."""
        spec = self.spec_for(body.get("model") if isinstance(body, dict) else None)
        return count_prompt_tokens(body, spec.token_factor)

    # ------------------------------------------------------------------ ASGI app
    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        rec, parse_error = self._record(scope, await self._read_body(receive))
        norm = rec.path.rstrip("/") or "/"
        if not self._authorized(rec.headers):
            await self._send_auth_error(send, rec, rec.headers)
        elif norm in _MODELS_PATHS or norm.startswith("/v1/models/"):
            await self._models(send, rec, rec.method, norm)
        elif norm == "/health":
            await self._send_json(send, rec, 200, {"status": "ok"}, outcome="reply")
        elif not rec.is_chat:
            error = _openai_error(
                f"Unknown request URL: {rec.method} {rec.path}.", code="unknown_url"
            )
            await self._send_json(send, rec, 404, error, outcome="not_found")
        else:
            rejection = self._reject_chat(rec, parse_error)
            if rejection is not None:
                status, error, outcome = rejection
                await self._send_json(send, rec, status, error, outcome=outcome)
            else:
                await self._chat(rec, scope, receive, send)

    def _record(self, scope: dict[str, Any], raw: bytes) -> tuple[Received, bool]:
        """Parse and log a request (before anything can fail)."""
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
        if rec.is_chat and isinstance(body, dict) and isinstance(body.get("messages"), list):
            rec.prompt_tokens = self.count_prompt_tokens(body)
            rec.is_summary = bool(self.summary_detector(body))
            rec.problems = [
                f"messages[{i}]: {text}"
                for i, _kind, text in tool_pairing_problems(body["messages"])
            ]
        with self._lock:
            self._received.append(rec)
        if self.on_request is not None:
            try:
                self.on_request(rec)
            except Exception:
                logging.getLogger(__name__).exception("on_request hook failed")
        return rec, parse_error

    def _reject_chat(self, rec: Received, parse_error: bool) -> tuple[int, Any, str] | None:
        """OpenAI-style 4xx for a malformed chat request, else None."""
        body = rec.body
        if rec.method != "POST":
            return (
                405,
                _openai_error(f"Method {rec.method} not allowed on {rec.path}."),
                "bad_request",
            )
        if parse_error or not isinstance(body, dict):
            return 400, _openai_error(_UNPARSABLE_JSON), "bad_request"
        for required in ("model", "messages"):
            if required not in body:
                error = _openai_error(
                    f"Missing required parameter: '{required}'.",
                    param=required,
                    code="missing_required_parameter",
                )
                return 400, error, "bad_request"
        if not isinstance(body["messages"], list):
            error = _openai_error(
                "Invalid type for 'messages': expected an array.",
                param="messages",
                code="invalid_type",
            )
            return 400, error, "bad_request"
        if self.validate_messages:
            found = tool_pairing_problems(body["messages"])
            if found:
                index, _kind, text = found[0]
                return (
                    400,
                    _openai_error(text, param=f"messages.[{index}].role"),
                    "invalid_messages",
                )
        return None

    async def _chat(self, rec: Received, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body: dict[str, Any] = rec.body
        spec = self.spec_for(body.get("model"))
        overflow = overflow_error(spec, rec.prompt_tokens or 0, body, len(rec.raw))
        if overflow is not None and body.get("stream") is True and spec.stream_errors == "event":
            await self._send_error_event(send, rec, overflow)
            return
        if overflow is not None:
            await self._send_fail(send, rec, overflow, outcome="overflow")
            return
        with self._lock:
            scripted = self._queue.popleft() if self._queue else None
        try:
            behaviour = scripted if scripted is not None else await self._respond(body)
        except Exception as exc:
            tb = traceback.format_exc()
            logging.getLogger(__name__).error("simulator responder failed:\n%s", tb)
            error = _openai_error(f"simulator responder raised {exc!r}", "server_error")
            await self._send_json(send, rec, 500, error, outcome="responder_error")
            return
        await self._execute(behaviour, body, spec, rec, scope, receive, send)

    async def _respond(self, body: dict[str, Any]) -> Behaviour:
        if self.responder is not None:
            result = self.responder(body)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, str):
                return Reply(content=result)
            if result is not None:
                if not isinstance(result, Reply | Fail | Hang | Disconnect | StreamError):
                    raise TypeError(f"responder returned {result!r}")
                return result
        return default_reply(body)

    async def _execute(
        self,
        behaviour: Behaviour,
        body: dict[str, Any],
        spec: ModelSpec,
        rec: Received,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
    ) -> None:
        stream = bool(body.get("stream"))
        if isinstance(behaviour, Fail):
            await self._send_fail(send, rec, behaviour, outcome="fail")
            return
        if isinstance(behaviour, Hang):
            if behaviour.after_chunks is not None and stream:
                reply = await self._reply_for(behaviour.then, body)
                await self._stream(
                    scope,
                    receive,
                    send,
                    rec,
                    body,
                    spec,
                    reply,
                    stop_at=behaviour.after_chunks,
                    mode="hang",
                    hang_s=behaviour.seconds,
                )
                return
            result = await self._pause(behaviour.seconds, receive)
            if result == "closing":
                rec.outcome = "hang"
                await self._abort(scope, receive)
                return
            if result == "gone":
                rec.outcome = "client_gone"
                return
            then = behaviour.then if behaviour.then is not None else await self._respond(body)
            if isinstance(then, Hang):
                then = default_reply(body)
            await self._execute(then, body, spec, rec, scope, receive, send)
            return
        if isinstance(behaviour, Disconnect):
            rec.outcome = "disconnect"
            if not stream:
                await self._abort(scope, receive)
                return
            reply = await self._reply_for(behaviour.reply, body)
            await self._stream(
                scope,
                receive,
                send,
                rec,
                body,
                spec,
                reply,
                stop_at=behaviour.after_chunks,
                mode="disconnect",
            )
            return
        if isinstance(behaviour, StreamError):
            if not stream:
                await self._send_json(
                    send, rec, 500, {"error": behaviour.error}, outcome="stream_error"
                )
                return
            reply = await self._reply_for(behaviour.reply, body)
            await self._stream(
                scope,
                receive,
                send,
                rec,
                body,
                spec,
                reply,
                stop_at=behaviour.after_chunks,
                mode="error",
                error=behaviour.error,
            )
            return
        # Reply
        if stream:
            await self._stream(scope, receive, send, rec, body, spec, behaviour)
            return
        tool_calls = normalize_tool_calls(behaviour.tool_calls or [], self._next_call_id)
        prompt = (
            behaviour.prompt_tokens
            if behaviour.prompt_tokens is not None
            else rec.prompt_tokens or 0
        )
        payload = chat_completion(
            completion_id=self._next_completion_id(),
            created=int(time.time()),
            model=str(body.get("model")),
            reply=behaviour,
            tool_calls=tool_calls,
            prompt_tokens=prompt,
            include_usage=spec.usage,
        )
        await self._send_json(send, rec, 200, payload, outcome="reply")

    async def _reply_for(self, given: Any, body: dict[str, Any]) -> Reply:
        if isinstance(given, Reply):
            return given
        result = await self._respond(body)
        return result if isinstance(result, Reply) else default_reply(body)

    async def _stream(
        self,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
        rec: Received,
        body: dict[str, Any],
        spec: ModelSpec,
        reply: Reply,
        *,
        stop_at: int | None = None,
        mode: str | None = None,
        hang_s: float = 0.0,
        error: dict[str, Any] | None = None,
    ) -> None:
        options = body.get("stream_options")
        asked = isinstance(options, dict) and bool(options.get("include_usage"))
        tool_calls = normalize_tool_calls(reply.tool_calls or [], self._next_call_id)
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else rec.prompt_tokens or 0
        chunks = list(
            stream_chunks(
                completion_id=self._next_completion_id(),
                created=int(time.time()),
                model=str(body.get("model")),
                reply=reply,
                tool_calls=tool_calls,
                prompt_tokens=prompt,
                include_usage=asked and spec.stream_usage,
            )
        )
        delay = reply.chunk_delay_s if reply.chunk_delay_s is not None else self.chunk_delay_s
        transport = (scope.get("extensions") or {}).get(TRANSPORT_KEY)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-request-id", f"req_sim_{id(rec):x}".encode()),
                ],
            }
        )
        rec.status = 200
        rec.outcome = {
            None: "reply",
            "hang": "hang",
            "disconnect": "disconnect",
            "error": "stream_error",
        }[mode]
        for index in range(len(chunks) + 1):
            if mode is not None and stop_at is not None and index == min(stop_at, len(chunks)):
                if mode == "disconnect":
                    await self._abort(scope, receive)
                    return
                if mode == "error":
                    await send(
                        {
                            "type": "http.response.body",
                            "body": encode_event({"error": error}),
                            "more_body": True,
                        }
                    )
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                result = await self._pause(hang_s, receive)
                if result == "closing":
                    await self._abort(scope, receive)
                    return
                if result == "gone":
                    rec.outcome = "client_gone"
                    return
                rec.outcome = "reply"
            if index == len(chunks):
                break
            await send(
                {
                    "type": "http.response.body",
                    "body": encode_event(chunks[index]),
                    "more_body": True,
                }
            )
            if transport is not None and transport.is_closing():
                rec.outcome = "client_gone"
                return
            if delay > 0:
                assert self._closing is not None
                try:
                    await asyncio.wait_for(self._closing.wait(), delay)
                except TimeoutError:
                    pass
                else:
                    await self._abort(scope, receive)
                    return
            else:
                await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": DONE, "more_body": False})

    # ------------------------------------------------------------------ helpers
    def _next_completion_id(self) -> str:
        return f"chatcmpl-sim{next(self._completion_ids):06d}"

    def _next_call_id(self) -> str:
        return f"call_{next(self._call_ids)}"

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.required_api_key is None:
            return True
        return self._presented_key(headers) == self.required_api_key

    @staticmethod
    def _presented_key(headers: dict[str, str]) -> str | None:
        auth = headers.get("authorization")
        if auth and auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return headers.get("x-api-key") or headers.get("api-key")

    async def _send_auth_error(self, send: Any, rec: Received, headers: dict[str, str]) -> None:
        key = self._presented_key(headers)
        if key:
            msg = (
                f"Incorrect API key provided: {_mask_key(key)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys."
            )
            payload = _openai_error(msg, code="invalid_api_key")
        else:
            msg = (
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
                "or as the password "
                "field (with blank username) if you're accessing the API from your browser and are "
                "prompted for a username. You can obtain an API key from "
                "https://platform.openai.com/account/api-keys."
            )
            payload = _openai_error(msg)
        await self._send_json(send, rec, 401, payload, outcome="unauthorized")

    async def _models(self, send: Any, rec: Received, method: str, norm: str) -> None:
        def entry(name: str, spec: ModelSpec) -> dict[str, Any]:
            return {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "provider-simulator",
                "max_model_len": spec.window,
                "context_length": spec.window,
            }

        if method != "GET":
            await self._send_json(
                send,
                rec,
                405,
                _openai_error(f"Method {method} not allowed."),
                outcome="bad_request",
            )
            return
        if norm.startswith("/v1/models/"):
            name = norm[len("/v1/models/") :]
            if name in self.models:
                await self._send_json(
                    send, rec, 200, entry(name, self.models[name]), outcome="reply"
                )
            else:
                await self._send_json(
                    send,
                    rec,
                    404,
                    _openai_error(
                        f"The model '{name}' does not exist", param="model", code="model_not_found"
                    ),
                    outcome="not_found",
                )
            return
        data = [entry(name, spec) for name, spec in self.models.items()]
        await self._send_json(send, rec, 200, {"object": "list", "data": data}, outcome="reply")

    @staticmethod
    async def _send_error_event(send: Any, rec: Received, fail: Fail) -> None:
        """A 200 stream whose one event is the error (no [DONE]), as providers that report
        errors after the status line do."""
        payload, _ = fail.encoded()
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        rec.status, rec.outcome = 200, "overflow"
        event = b"data: " + payload + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": False})

    async def _send_fail(self, send: Any, rec: Received, fail: Fail, outcome: str) -> None:
        payload, content_type = fail.encoded()
        await self._send_raw(send, rec, fail.status, payload, content_type, fail.headers, outcome)

    async def _send_json(
        self, send: Any, rec: Received, status: int, payload: Any, outcome: str
    ) -> None:
        await self._send_raw(
            send, rec, status, _json_bytes(payload), "application/json", None, outcome
        )

    @staticmethod
    async def _send_raw(
        send: Any,
        rec: Received,
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
        headers.append((b"x-request-id", f"req_sim_{id(rec):x}".encode()))
        for k, v in (extra or {}).items():
            if k.lower() != "content-length":
                headers.append((k.lower().encode("latin-1"), str(v).encode("latin-1")))
        rec.status, rec.outcome = status, outcome
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    @staticmethod
    async def _read_body(receive: Any) -> bytes:
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _pause(self, seconds: float, receive: Any) -> str:
        """Wait ``seconds`` -> "timeout"; or earlier "gone" (the client disconnected) or
        "closing" (stop() was called)."""
        assert self._closing is not None
        closing = asyncio.ensure_future(self._closing.wait())
        gone = asyncio.ensure_future(receive())
        try:
            done, _ = await asyncio.wait(
                {closing, gone}, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            pending = [t for t in (closing, gone) if not t.done()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if closing in done:
            return "closing"
        if gone in done:
            return "gone"
        return "timeout"

    async def _abort(self, scope: dict[str, Any], receive: Any) -> None:
        """Close the connection for real (no response / an incomplete body)."""
        transport = (scope.get("extensions") or {}).get(TRANSPORT_KEY)
        if transport is None:
            raise _AbruptClose("simulated disconnect")
        transport.close()
        try:
            await asyncio.wait_for(receive(), 1.0)  # returns once uvicorn saw the connection go
        except TimeoutError:
            pass
