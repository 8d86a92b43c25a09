"""The provider simulator: a real uvicorn server on loopback, in a background thread, with the
request log and the queue of scripted behaviours. Answers are written by ``endpoints`` (requests
no script decides) and ``behaviours`` (chat replies, streams and scripted failures)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import uvicorn

from .anthropic_api import MessagesAPI, is_messages_path
from .behaviours import ChatTurn, perform
from .connection import Receive, Scope, Send, SimH11Protocol, read_body
from .dialects import overflow_error, tool_pairing_problems
from .endpoints import (
    chat_rejection,
    is_models_path,
    openai_error,
    presented_key,
    send_auth_error,
    send_models,
    send_unknown_url,
)
from .exchange import Exchange, parse_request
from .gemini_api import GeminiAPI, is_gemini_path
from .images import image_error
from .models import Behaviour, Disconnect, Fail, Hang, ModelSpec, Received, Reply, StreamError
from .relayed import is_relayed_path, send_relayed
from .replies import default_reply, is_summary_request
from .responses_api import ResponsesAPI
from .tokens import count_prompt_tokens, get_encoding

Responder = Callable[[dict[str, Any]], Any]

DEFAULT_WINDOW = 128_000


class Simulator:
    """An OpenAI-compatible provider for tests (see README.md in this package)."""

    def __init__(
        self,
        models: Mapping[str, ModelSpec | int] | None = None,
        default: ModelSpec | None = None,
        *,
        required_api_key: str | None = None,
        chunk_delay_s: float = 0.0,
        validate_messages: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_log: bool = True,
        keep_alive_s: int = 5,
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
        # False for a benchmark's upstream: a log of every body grows without bound, and
        # freeing it in one go would pause the server in the middle of someone's request.
        self.keep_log = keep_log
        self.keep_alive_s = keep_alive_s  # how long an idle client connection stays open
        self.host = host
        self._port = port

        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._queue: deque[Behaviour] = deque()
        self._completion_ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self.responses = ResponsesAPI(self)

        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._thread_error: BaseException | None = None
        self.messages_api = MessagesAPI(self)
        self.gemini = GeminiAPI(self)

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
            http=SimH11Protocol,
            proxy_headers=False,
            ws="none",
            lifespan="off",
            loop="asyncio",
            log_config=None,
            access_log=False,
            timeout_keep_alive=self.keep_alive_s,
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

    @property
    def gemini_url(self) -> str:
        """The base URL of the Gemini dialect (an upstream's `base_url` for `apis: [gemini]`)."""
        return f"{self.url}/v1beta"

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
        self.messages_api.reset()
        self.gemini.reset()
        self.responses.clear()

    @property
    def received(self) -> list[Received]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._received)

    @property
    def chat_requests(self) -> list[Received]:
        return [r for r in self.received if r.is_chat]

    @property
    def messages_requests(self) -> list[Received]:
        return [r for r in self.received if r.is_messages]

    @property
    def responses_requests(self) -> list[Received]:
        return [r for r in self.received if r.is_responses]

    @property
    def gemini_requests(self) -> list[Received]:
        """Gemini `generateContent` / `streamGenerateContent` calls (summaries included)."""
        return [
            r for r in self.received if "GenerateContent" in r.path or "generateContent" in r.path
        ]

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
    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        rec, parse_error = self._record(scope, await read_body(receive))
        exchange = Exchange(scope, receive, send, rec)
        norm = rec.path.rstrip("/") or "/"
        if is_gemini_path(norm):
            await self.gemini.handle(exchange)
        elif self.messages_api.serves(rec, norm):
            await self.messages_api.handle(exchange, norm)
        elif not self._authorized(rec.headers):
            await send_auth_error(exchange)
        elif is_models_path(norm):
            await send_models(exchange, self.models, norm)
        elif norm == "/health":
            await exchange.send_json(200, {"status": "ok"}, outcome="reply")
        elif rec.is_responses:
            await self.responses.handle(exchange, parse_error)
        elif is_relayed_path(norm):
            await send_relayed(exchange, norm)
        elif not rec.is_chat:
            await send_unknown_url(exchange)
        else:
            rejection = chat_rejection(rec, parse_error, self.validate_messages)
            if rejection is not None:
                status, error, outcome = rejection
                await exchange.send_json(status, error, outcome=outcome)
            else:
                await self._chat(exchange)

    def _record(self, scope: Scope, raw: bytes) -> tuple[Received, bool]:
        """Parse and log a request (before anything can fail)."""
        rec, parse_error = parse_request(scope, raw)
        body = rec.body
        if rec.is_chat and isinstance(body, dict) and isinstance(body.get("messages"), list):
            self._inspect_chat(rec, body)
        elif is_messages_path(rec.path.rstrip("/")):
            self.messages_api.inspect(rec)
        elif rec.is_responses:
            self.responses.inspect(rec)
        elif is_gemini_path(rec.path):
            self.gemini.inspect(rec)
        if self.keep_log:
            with self._lock:
                self._received.append(rec)
        if self.on_request is not None:
            try:
                self.on_request(rec)
            except Exception:
                logging.getLogger(__name__).exception("on_request hook failed")
        return rec, parse_error

    def _inspect_chat(self, rec: Received, body: dict[str, Any]) -> None:
        rec.prompt_tokens = self.count_prompt_tokens(body)
        rec.is_summary = bool(self.summary_detector(body))
        rec.problems = [
            f"messages[{i}]: {text}" for i, _kind, text in tool_pairing_problems(body["messages"])
        ]

    async def _chat(self, exchange: Exchange) -> None:
        rec = exchange.rec
        body: dict[str, Any] = rec.body
        spec = self.spec_for(body.get("model"))
        overflow, outcome = image_error(spec, body), "image_rejected"
        if overflow is None:
            overflow = overflow_error(spec, rec.prompt_tokens or 0, body, len(rec.raw))
            outcome = "overflow"
        if overflow is not None and body.get("stream") is True and spec.stream_errors == "event":
            await exchange.send_error_event(overflow)
            return
        if overflow is not None:
            await exchange.send_fail(overflow, outcome=outcome)
            return
        try:
            behaviour = await self.behaviour_for(body)
        except Exception as exc:
            tb = traceback.format_exc()
            logging.getLogger(__name__).error("simulator responder failed:\n%s", tb)
            error = openai_error(f"simulator responder raised {exc!r}", "server_error")
            await exchange.send_json(500, error, outcome="responder_error")
            return
        await perform(behaviour, self._turn(exchange, body, spec))

    def _turn(self, exchange: Exchange, body: dict[str, Any], spec: ModelSpec) -> ChatTurn:
        assert self._closing is not None  # set before the server accepts connections
        return ChatTurn(
            exchange=exchange,
            body=body,
            spec=spec,
            closing=self._closing,
            respond=self._respond,
            completion_id=self._next_completion_id,
            call_id=self._next_call_id,
            chunk_delay_s=lambda: self.chunk_delay_s,
        )

    async def behaviour_for(self, body: dict[str, Any], *, scripted: bool = True) -> Behaviour:
        """The next queued behaviour (unless ``scripted`` is False), else the responder's."""
        if scripted:
            with self._lock:
                queued = self._queue.popleft() if self._queue else None
            if queued is not None:
                return queued
        return await self._respond(body)

    @property
    def closing_event(self) -> asyncio.Event | None:
        return self._closing

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

    # ------------------------------------------------------------------ helpers
    def _next_completion_id(self) -> str:
        return f"chatcmpl-sim{next(self._completion_ids):06d}"

    def _next_call_id(self) -> str:
        return f"call_{next(self._call_ids)}"

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.required_api_key is None:
            return True
        return presented_key(headers) == self.required_api_key
