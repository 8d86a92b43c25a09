"""Throughput of `ctxgate serve --workers N`: the requests/s a closed loop of many clients gets.

    .venv/bin/python bench/workers.py                       # 1 and 2 workers, 8K and 64K, 3 rounds
    .venv/bin/python bench/workers.py --workers 1,2,4 --clients 64 --seconds 10 --rounds 5

The upstream runs in its own process: by default a canned one (bench/canned_upstream.py) that
answers at once without counting tokens, so that on a small machine it leaves the CPUs to
ctxgate; `--upstream simulator` uses the provider simulator (bench/overhead.py
--serve-simulator), which counts every prompt (4.6 ms of CPU at 64K). ctxgate runs
in its own (the supervisor and its workers, started afresh for every measurement, with SQLite
in the run directory); the clients in --load-procs processes of their own. Each of the
--clients clients (aiohttp) sends its next request as soon as it has read the previous
answer: the same agent history (tau-bench airline, as bench/overhead.py) each time, one
session per client, each client on a keep-alive connection of its own, as agents each have
their own HTTP client (a connection stays with one worker, and so does its session). After
--warmup seconds, the answers completed in the next --seconds are counted. `direct` is the
same loop against the upstream itself, in the same run: what the upstream and the clients
leave room for. The targets take turns in an order that changes every round (each goes first,
and follows each other, equally often), so that the drift of a shared machine's load hits
them alike, and the CPU that processes outside the benchmark used meanwhile is printed beside
every figure.

Results: a table per size on stdout, and bench/results/workers.{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench`, `compression`, `tests` importable
    sys.path.insert(0, str(REPO))

from bench.overhead_cells import round_orders  # noqa: E402
from bench.overhead_requests import (  # noqa: E402
    API_KEY,
    SIZES,
    build_history,
    request_body,
    request_headers,
)
from bench.overhead_services import (  # noqa: E402
    OWN_ENV,
    Service,
    free_port,
    machine_cpu_s,
    simulator_service,
)

OVERHEAD_SCRIPT = REPO / "bench" / "overhead.py"  # its --serve-simulator runs the upstream


@dataclass
class Sample:
    """One target at one size in one round."""

    target: str
    size: str
    round: int
    rps: float
    requests: int  # answered in the counted window
    errors: int
    p50_ms: float
    ctxgate_cpu_ms: float  # ctxgate's CPU (supervisor and workers) per answered request
    simulator_cpu_ms: float
    clients_cpu_ms: float
    other_cpus: float  # CPUs' worth used by processes outside this benchmark meanwhile
    load_avg: float


def ctxgate_service(run_dir: Path, upstream: str, workers: int) -> Service:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "workers": workers},
        "upstreams": {"sim": {"base_url": upstream, "api_key": API_KEY}},
        # A window large enough that compression never triggers: the proxy path is measured.
        "models": [{"match": "*", "upstream": "sim", "context_length": 1_000_000}],
        "storage": {"url": f"sqlite+aiosqlite:///{run_dir}/ctxgate-{workers}w-{port}.db"},
        "logging": {"level": "warning"},
    }
    path = run_dir / f"ctxgate-{workers}w.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(path)]
    base = f"http://127.0.0.1:{port}"
    return Service(
        f"ctxgate-{workers}w",
        argv,
        f"{base}/readyz",
        f"{base}/v1/chat/completions",
        run_dir / f"ctxgate-{workers}w.log",
        OWN_ENV,
    )


# --- one load process --------------------------------------------------------------------------


async def closed_loop(spec: dict[str, Any]) -> dict[str, Any]:
    """`clients` connections, each sending its next request once it has its answer."""
    import aiohttp

    body = Path(spec["body"]).read_bytes()
    started = time.monotonic()
    counted_from = started + spec["warmup"]
    until = counted_from + spec["seconds"]
    latencies: list[float] = []
    tally = {"all": 0, "errors": 0}
    first_error: list[str] = []

    async def client(i: int) -> None:
        # Its own connection, as an agent's own HTTP client: a session stays with one worker.
        connector = aiohttp.TCPConnector(limit=1)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            await requests(session, i)

    async def requests(session: aiohttp.ClientSession, i: int) -> None:
        headers = request_headers(f"{spec['prefix']}-{i}")
        while (sent := time.monotonic()) < until:
            try:
                async with session.post(spec["url"], data=body, headers=headers) as response:
                    content = await response.read()
                    ok = response.status == 200 and b'"ok: ' in content
                    problem = f"{response.status}: {content[:200]!r}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                ok, problem = False, f"{type(exc).__name__}: {exc}"
            done = time.monotonic()
            tally["all"] += ok
            if counted_from <= done < until:
                if ok:
                    latencies.append(done - sent)
                else:
                    tally["errors"] += 1
                    first_error[:] = first_error or [problem]

    await asyncio.gather(*(client(i) for i in range(spec["clients"])))
    return {
        "requests": len(latencies),
        "all_requests": tally["all"],
        "errors": tally["errors"],
        "first_error": first_error[0] if first_error else None,
        "latencies_ms": [round(x * 1000, 3) for x in latencies],
        "cpu_s": time.process_time(),
    }


def run_load(spec: dict[str, Any], procs: int) -> list[dict[str, Any]]:
    """The closed loop in `procs` processes, the clients split among them."""
    running = []
    for p in range(procs):
        part = dict(spec, clients=spec["clients"] // procs + (p < spec["clients"] % procs))
        part["prefix"] = f"{spec['prefix']}-p{p}"
        argv = [sys.executable, str(Path(__file__).resolve()), "--load", json.dumps(part)]
        running.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    reports = []
    for proc in running:
        out, _ = proc.communicate(timeout=spec["warmup"] + spec["seconds"] + 300)
        if proc.returncode != 0:
            raise RuntimeError(f"a load process failed ({proc.returncode})")
        reports.append(json.loads(out))
    return reports


# --- the run -----------------------------------------------------------------------------------


def measure(
    target: str,
    url: str,
    size: str,
    round_no: int,
    args: argparse.Namespace,
    run_dir: Path,
    sim: Service,
    proxy: Service | None,
) -> Sample:
    spec = {
        "url": url,
        "body": str(run_dir / f"{size}.json"),
        "clients": args.clients,
        "warmup": args.warmup,
        "seconds": args.seconds,
        "prefix": f"bench-{target}-{size}-r{round_no}",
    }
    load0, machine0, wall0 = os.getloadavg()[0], machine_cpu_s(), time.monotonic()
    sim0, proxy0 = sim.cpu_seconds(), proxy.cpu_seconds() if proxy else 0.0
    reports = run_load(spec, args.load_procs)
    machine, wall = machine_cpu_s() - machine0, time.monotonic() - wall0
    sim_cpu = sim.cpu_seconds() - sim0
    proxy_cpu = (proxy.cpu_seconds() - proxy0) if proxy else 0.0
    clients_cpu = sum(r["cpu_s"] for r in reports)
    other = max(0.0, machine - sim_cpu - proxy_cpu - clients_cpu) / wall
    answered = sum(r["all_requests"] for r in reports) or 1
    latencies = [x for r in reports for x in r["latencies_ms"]]
    errors = sum(r["errors"] for r in reports)
    if errors:
        first = next(r["first_error"] for r in reports if r["first_error"])
        print(f"  {target} {size}: {errors} errors, the first: {first}", flush=True)
    requests = len(latencies)
    return Sample(
        target,
        size,
        round_no,
        rps=requests / args.seconds,
        requests=requests,
        errors=errors,
        p50_ms=statistics.median(latencies) if latencies else float("nan"),
        ctxgate_cpu_ms=1000 * proxy_cpu / answered,
        simulator_cpu_ms=1000 * sim_cpu / answered,
        clients_cpu_ms=1000 * clients_cpu / answered,
        other_cpus=other,
        load_avg=load0,
    )


def run(args: argparse.Namespace, run_dir: Path) -> list[Sample]:
    for size in args.sizes:
        messages, tools, tokens = build_history(SIZES[size])
        (run_dir / f"{size}.json").write_bytes(request_body(messages, tools, False))
        print(f"{size}: {tokens} tokens, {len(messages)} messages", flush=True)
    sim = upstream_service(run_dir, args.upstream)
    targets = ["direct", *[f"{n}w" for n in args.workers]]
    samples: list[Sample] = []
    sim.start()
    try:
        sim.wait_ready(args.startup_timeout)
        upstream = sim.chat_url.removesuffix("/chat/completions")
        orders = round_orders(targets)
        for round_no in range(args.rounds):
            for target in orders[round_no % len(orders)]:
                samples += measure_target(target, upstream, round_no, args, run_dir, sim)
    finally:
        sim.stop()
    return samples


def measure_target(
    target: str,
    upstream: str,
    round_no: int,
    args: argparse.Namespace,
    run_dir: Path,
    sim: Service,
) -> list[Sample]:
    proxy = None
    url = sim.chat_url
    if target != "direct":
        proxy = ctxgate_service(run_dir, upstream, int(target.removesuffix("w")))
        proxy.start()
        url = proxy.chat_url
    try:
        if proxy is not None:
            proxy.wait_ready(args.startup_timeout)
            every_worker_up(proxy, int(target.removesuffix("w")), args.startup_timeout)
        out = []
        for size in args.sizes:
            sample = measure(target, url, size, round_no, args, run_dir, sim, proxy)
            print(
                f"round {round_no + 1} {target:>6} {size:>3}: {sample.rps:7.1f} req/s "
                f"p50 {sample.p50_ms:6.1f} ms, ctxgate {sample.ctxgate_cpu_ms:.2f} ms CPU/req, "
                f"other processes {sample.other_cpus:.2f} CPUs, load {sample.load_avg:.1f}",
                flush=True,
            )
            out.append(sample)
        return out
    finally:
        if proxy is not None:
            proxy.stop()


def every_worker_up(proxy: Service, workers: int, timeout_s: float) -> None:
    """Wait until `workers` distinct pids answer /healthz (a connection waiting on a worker
    that is still starting would count its start-up against the first sample)."""
    health = proxy.health_url.replace("/readyz", "/healthz")
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proxy.name}: only {len(seen)} workers answered\n{proxy.tail()}")
        try:
            with httpx.Client(timeout=5, trust_env=False) as http:  # a fresh connection
                seen.add(http.get(health).json()["pid"])
        except httpx.HTTPError:
            time.sleep(0.2)


def upstream_service(run_dir: Path, kind: str) -> Service:
    """The provider simulator, or the canned upstream that leaves the CPUs to ctxgate."""
    if kind == "simulator":
        return simulator_service(run_dir, sys.executable, OVERHEAD_SCRIPT)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [sys.executable, str(REPO / "bench" / "canned_upstream.py"), str(port)]
    chat = f"{base}/v1/chat/completions"
    return Service("canned", argv, f"{base}/health", chat, run_dir / "canned.log")


# --- the report --------------------------------------------------------------------------------


def report(samples: Sequence[Sample], args: argparse.Namespace) -> str:
    targets = ["direct", *[f"{n}w" for n in args.workers]]
    lines = [
        f"{args.clients} clients in {args.load_procs} process(es), closed loop, "
        f"{args.upstream} upstream, "
        f"{args.seconds:g} s counted after {args.warmup:g} s, {args.rounds} rounds; "
        f"{len(os.sched_getaffinity(0))} usable cores, shared with other work.",
        "",
    ]
    for size in args.sizes:
        rows = {t: [s for s in samples if s.size == size and s.target == t] for t in targets}
        one = statistics.median(s.rps for s in rows["1w"]) if rows.get("1w") else None
        direct = statistics.median(s.rps for s in rows["direct"])
        lines += [
            f"### {size}",
            "",
            "| target | req/s each round | median req/s | x 1 worker | x direct "
            "| ctxgate CPU ms/req | other processes (CPUs) |",
            "|---|---|---|---|---|---|---|",
        ]
        for target in targets:
            got = rows[target]
            median = statistics.median(s.rps for s in got)
            vs_one = f"{median / one:.2f}" if one and target != "direct" else ""
            cpu = statistics.median(s.ctxgate_cpu_ms for s in got) if target != "direct" else 0
            others = ", ".join(f"{s.other_cpus:.2f}" for s in got)
            lines.append(
                f"| {target} | {', '.join(f'{s.rps:.0f}' for s in got)} | {median:.0f} "
                f"| {vs_one} | {median / direct:.2f} | {cpu:.2f} | {others} |"
            )
        lines.append("")
    lines.append("Curve (median req/s by workers): " + "; ".join(curve(samples, args)))
    return "\n".join(lines)


def curve(samples: Sequence[Sample], args: argparse.Namespace) -> list[str]:
    out = []
    for size in args.sizes:
        points = []
        for n in args.workers:
            got = [s.rps for s in samples if s.size == size and s.target == f"{n}w"]
            points.append(f"{n}: {statistics.median(got):.0f}")
        out.append(f"{size} " + ", ".join(points))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workers", type=_counts, default=[1, 2], help="comma-separated, e.g. 1,2,4")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--load-procs", type=int, default=1, help="processes the clients run in")
    p.add_argument("--seconds", type=float, default=10.0, help="counted seconds per sample")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before counting")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--upstream",
        choices=("canned", "simulator"),
        default="canned",
        help="canned: answers at once without counting (bench/canned_upstream.py), so that "
        "the upstream does not set the pace on a small machine; simulator: the provider "
        "simulator, which counts every prompt",
    )
    p.add_argument("--out", help="output stem (default bench/results/workers)")
    p.add_argument("--run-dir", help="configs, logs, DB (default /tmp/bench-workers/<time>)")
    p.add_argument("--startup-timeout", type=float, default=120.0)
    p.add_argument("--load", metavar="SPEC", help=argparse.SUPPRESS)  # one load process
    return p.parse_args(argv)


def _counts(text: str) -> list[int]:
    counts = [int(n) for n in text.split(",") if n.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("worker counts are positive integers")
    return sorted(set(counts))


def _stop_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.load:
        print(json.dumps(asyncio.run(closed_loop(json.loads(args.load)))))
        return 0
    # A background run (`&`) ignores SIGINT and dies of SIGTERM without cleaning up: make both
    # unwind, so that the servers started here are stopped on the way out.
    signal.signal(signal.SIGINT, _stop_on_signal)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    run_dir = Path(args.run_dir or f"/tmp/bench-workers/run-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    samples = run(args, run_dir)
    text = report(samples, args)
    print("\n" + text)
    stem = Path(args.out) if args.out else REPO / "bench" / "results" / "workers"
    stem.with_suffix(".md").write_text(text + "\n")
    raw = {"args": {k: v for k, v in vars(args).items() if k != "load"}}
    raw["samples"] = [asdict(s) for s in samples]
    stem.with_suffix(".json").write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
