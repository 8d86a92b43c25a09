"""The embedded server of `ctxgate run`: zero-config settings from the user's environment, and
a real uvicorn serving ctxgate on a free loopback port from a background thread.

Each provider gets an upstream from its usual variables, read where `ctxgate serve` reads them
(session/config/environment.py), base URLs only: no key is put in the config, so the agent's
own credential is what reaches the provider. Models are routed by name (`claude*` to
Anthropic, `gemini*` to Gemini), every other name to the provider of the agent being run.
Sessions are kept in SQLite under the user's data directory, so a later `ctxgate run`
continues them and its dashboard shows them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn

from proxy.config_file import parse_settings
from proxy.edge.app import CtxgateApp, create_app
from proxy.edge.logs import PlainFormatter, log_through
from proxy.edge.services import Services
from session.config.environment import models_document, upstreams_document
from session.config.settings import LoggingSettings, Settings


def data_dir(environ: Mapping[str, str]) -> Path:
    """$XDG_DATA_HOME/ctxgate, else ~/.local/share/ctxgate (the XDG base directory rule: a
    relative XDG_DATA_HOME is ignored)."""
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "ctxgate"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share" / "ctxgate"


def run_document(
    environ: Mapping[str, str], home: Path, provider: str, *, port: int, admin_key: str
) -> dict[str, Any]:
    """The settings document of an embedded server for an agent speaking to `provider`."""
    return {
        "upstreams": upstreams_document(environ, keys=False),
        "models": models_document(provider),
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"url": f"sqlite+aiosqlite:///{home / 'ctxgate.db'}"},
        "auth": {"admin_key": admin_key},
        "logging": {"level": "info", "json": False},
    }


def run_settings(environ: Mapping[str, str], home: Path, provider: str, port: int) -> Settings:
    """Zero-config settings for `ctxgate run` (a fresh admin key for this run's dashboard)."""
    admin_key = secrets.token_urlsafe(18)
    return parse_settings(run_document(environ, home, provider, port=port, admin_key=admin_key), {})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_to_file(path: Path, settings: LoggingSettings) -> None:
    """The server's log goes to a file: the agent owns the terminal."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(PlainFormatter())
    log_through(handler, settings)


class EmbeddedServer:
    """ctxgate on `settings.server.host:port`, served from a background thread; `stop()` waits
    for its requests and its services to close (queued usage is written out)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app: CtxgateApp = create_app(settings)
        config = uvicorn.Config(
            self.app,
            host=settings.server.host,
            port=settings.server.port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://{self.settings.server.host}:{self.settings.server.port}"

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services

    def start(self, timeout_s: float = 30.0) -> EmbeddedServer:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve()), daemon=True, name="ctxgate"
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ctxgate did not start on {self.base}; see its log")
            time.sleep(0.01)
        return self

    def metrics_text(self) -> str:
        return self.services.metrics.render().decode()

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
