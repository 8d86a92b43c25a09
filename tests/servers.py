"""Run ctxgate for real on a loopback port, in a background thread (tests and benchmarks)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Self

import uvicorn

from proxy.config_file import parse_settings
from proxy.edge.app import create_app
from session.config.settings import Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThreadedServer:
    """A real uvicorn serving `app` on 127.0.0.1 from a background thread; `with` runs it."""

    def __init__(
        self, app: Any, *, port: int | None = None, name: str = "uvicorn", **config: Any
    ) -> None:
        self.port = port or free_port()
        self.name = name
        settings = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, **config
        )
        self.server = uvicorn.Server(settings)
        self._thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's event loop (its connections live there)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main()), daemon=True, name=f"{self.name}-{self.port}"
        )
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyServer(ThreadedServer):
    """`with ProxyServer(settings) as proxy: proxy.base_url` — ctxgate on a loopback port."""

    def __init__(self, settings: Settings, *, port: int | None = None, **app_kwargs: Any) -> None:
        self.settings = settings
        self.app = create_app(settings, **app_kwargs)
        super().__init__(
            self.app, port=port, name="ctxgate", lifespan="on", timeout_graceful_shutdown=2
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def services(self) -> Any:
        return self.app.state.services


class Recorder:
    """ASGI wrapper keeping the bodies clients POST to `path` (what the client sent, before
    ctxgate), then passing each request on unchanged."""

    def __init__(self, app: Any, path: str) -> None:
        self.app = app
        self.path = path
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        self.bodies.append(body)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def settings_for(
    upstream_url: str,
    db_path: str,
    *,
    models: list[dict[str, Any]] | None = None,
    compression: dict[str, Any] | None = None,
    storage: dict[str, Any] | None = None,
    api_key: str | None = "sk-upstream-test",
    **extra: Any,
) -> Settings:
    """Settings pointing at a simulator, with a SQLite file under a temp dir; compression
    passes run on the loop (`server.pool_processes: 0`) unless `server` asks for a pool:
    starting worker processes for every test's server would double the suite's time."""
    extra["server"] = {"pool_processes": 0, **extra.get("server", {})}
    upstream: dict[str, Any] = {"base_url": upstream_url, "timeout_s": 10}
    if api_key is not None:
        upstream["api_key"] = api_key
    document: dict[str, Any] = {
        "upstreams": {"sim": upstream},
        "models": models or [{"match": "*", "upstream": "sim", "context_length": 128000}],
        "storage": {"url": f"sqlite+aiosqlite:///{db_path}", **(storage or {})},
        "compression": compression or {},
        "logging": {"json": False, "level": "warning"},
        **extra,
    }
    return parse_settings(document, {})
