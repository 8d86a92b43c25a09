"""Latency that ctxgate adds over a direct call to the same upstream (SPEC §10).

    .venv/bin/python bench/overhead.py            # full run, ~10 minutes on 2 cores
    .venv/bin/python bench/overhead.py --quick    # ~1-2 minutes, writes overhead-quick.*
    .venv/bin/python bench/overhead.py --only ctxgate,floor   # just these proxies
    scripts/install-peers.sh                      # optional: LiteLLM + Headroom in their own venvs

Every server runs in its own process on 127.0.0.1: the provider simulator (the upstream), the
floor (bench/overhead_floor.py: a bare uvicorn + httpx relay), ctxgate, and, when their
virtualenvs exist under --peers-dir, LiteLLM and Headroom in front of the same simulator (how
each is configured, and why: bench/overhead_services.py and bench/README.md).

One httpx client (HTTP/1.1 keep-alive) sends the same history to the direct URL and to each
proxy in alternation (the order changes every round so that each target goes first, and
follows each other target, equally often), so drift in machine load hits every target alike.
What a cell sends (`--bodies`): `same`, the identical body every time; `fresh`, a body no
session has seen (a new tag in its first user message, a new session id); `novel`, one that
shares not even its opening with an earlier one (the tag starts its system prompt); `growing`,
one session per client that gains a turn every round (overhead_requests.Bodies).
A sample is the time to the last byte: the whole body, or for a stream the moment
`data: [DONE]` arrives.

Cells: {same, fresh, novel, growing} x {8K, 64K}-token agent history (tau-bench airline
conversations chained, with their 14 tools) x {non-streaming, streaming} x {1 sequential
client, 16 concurrent clients}. With 16 clients every round fires 16 requests at one target
at once, then moves to the next target.

"Added" latency = percentile(proxy) - percentile(direct) for p50/p90/p99; the paired
per-sample difference (proxy - direct of the same round and client) is reported as well, and
each proxy's added p50 as a multiple of the floor's (and, under 16 clients, in ms above it).
Results: Markdown table on stdout, plus bench/results/overhead.{md,json}.

The 200K- and 800K-token cells, the stall cell (another session's latency during a large
compression) and the 100,000-message cell run from bench/overhead_large.py, beside the same
two floors (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench`, `compression`, `tests` importable
    sys.path.insert(0, str(REPO))

from bench.overhead_cells import GAP_S, QUIET_CORES, Cell, CellResult, merged, run_cell  # noqa: E402
from bench.overhead_report import (  # noqa: E402
    hot_spots,
    markdown,
    profile_markdown,
    raw_samples,
    run_meta,
    summarize,
)
from bench.overhead_requests import (  # noqa: E402
    BODIES,
    SIZES,
    Bodies,
    build_history,
    request_body,
    request_headers,
    timed_request,
)
from bench.overhead_services import (  # noqa: E402
    PROXIES,
    Service,
    ctxgate_service,
    floor_service,
    peer_services,
    running,
    simulator_service,
    smoke,
)

UPSTREAM_KEEP_ALIVE_S = 120
# Below the 5 s after which uvicorn (every proxy here runs on it) closes an idle connection, so
# the client never reuses one the server is closing; above it, a ReadError now and then.
CLIENT_KEEP_ALIVE_S = 3.0
# samples/s: low enough that py-spy barely slows the process down (BENCH_PYSPY_RATE for more)
PROFILE_RATE = int(os.environ.get("BENCH_PYSPY_RATE", "200"))
PROFILE_CASES = (  # (name, size, bodies, stream)
    ("8k-nonstream", "8k", "same", False),
    ("8k-stream", "8k", "same", True),
    ("8k-fresh-nonstream", "8k", "fresh", False),
    ("8k-novel-nonstream", "8k", "novel", False),
    ("8k-growing-nonstream", "8k", "growing", False),
    ("64k-nonstream", "64k", "same", False),
    ("64k-stream", "64k", "same", True),
    ("64k-fresh-nonstream", "64k", "fresh", False),
    ("64k-growing-nonstream", "64k", "growing", False),
)


def serve_simulator(port: int) -> int:
    """Run the provider simulator without its request log.

    The log would keep every 250 KB body, parsed; clearing it now and then would free
    thousands of them at once, a pause of the upstream that lands in random samples.
    """
    from tests.simulator import ModelSpec, Simulator

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    spec = ModelSpec(window=2_000_000)
    # Providers keep idle connections open far longer than uvicorn's 5 s: at 5 s a proxy
    # reusing a connection after one of the 4-5 s rounds with the peers raced its close.
    keep = UPSTREAM_KEEP_ALIVE_S
    with Simulator(default=spec, port=port, keep_log=False, keep_alive_s=keep) as sim:
        print(f"provider simulator listening on {sim.base_url}", flush=True)
        while not stopped.wait(1.0):
            pass
    return 0


async def profile_ctxgate(
    client: httpx.AsyncClient,
    svc: Service,
    sizes: Sequence[str],
    py_spy: str,
    requests: int,
) -> dict[str, Any]:
    """Sample ctxgate with py-spy over `requests` sequential requests per case."""
    assert svc.proc is not None
    found: dict[str, Any] = {}
    for case, size, kind, stream in PROFILE_CASES:
        if size not in sizes:
            continue
        bodies = Bodies(kind, *build_history(SIZES[size]), stream)
        out = svc.log_path.parent / f"py-spy-{case}.txt"
        argv = [py_spy, "record", "--pid", str(svc.proc.pid), "--format", "raw"]
        # Blocking mode (the default) pauses ctxgate per sample; --nonblocking gives torn stacks.
        argv += ["--rate", str(PROFILE_RATE), "--output", str(out)]
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await asyncio.sleep(1.5)  # py-spy attaches
        cpu0 = svc.cpu_seconds()
        for _ in range(requests):
            body, session = bodies.get(bodies.next_round(), 0, f"prof-{case}")
            await timed_request(client, svc.chat_url, body, request_headers(session), stream)
        await asyncio.sleep(0.5)  # let the last usage write-behind run inside the window
        cpu_ms = (svc.cpu_seconds() - cpu0) * 1000 / requests
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
        found[case] = hot_spots(out, cpu_ms) | {"requests": requests, "stacks": str(out)}
    return found


def plan(args: argparse.Namespace) -> list[Cell]:
    quick = args.quick
    seq = {"8k": args.n8k or (30 if quick else 200), "64k": args.n64k or (15 if quick else 100)}
    conc = {
        "8k": args.rounds8k or (3 if quick else 20),
        "64k": args.rounds64k or (2 if quick else 8),
    }
    cells = []
    for bodies in args.bodies:
        for size in args.sizes:
            for stream in (False, True):
                cells.append(Cell(size, stream, 1, seq[size], 5 if quick else 20, bodies))
                if args.concurrency > 1:
                    warm = 1 if quick else 2
                    cells.append(Cell(size, stream, args.concurrency, conc[size], warm, bodies))
    return cells


async def measure(
    cells: list[Cell],
    services: list[Service],
    histories: dict[str, bytes],
    args: argparse.Namespace,
) -> tuple[list[CellResult], dict[str, Any]]:
    sources = {size: build_history(SIZES[size]) for size in args.sizes}
    bodies = {cell: Bodies(cell.bodies, *sources[cell.size], cell.stream) for cell in cells}
    limits = httpx.Limits(
        max_connections=256, max_keepalive_connections=256, keepalive_expiry=CLIENT_KEEP_ALIVE_S
    )
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        services = await smoke(client, services, histories["8k-nonstream"])
        by_name = {("direct" if s.name == "simulator" else s.name): s for s in services}
        passes: dict[Cell, list[CellResult]] = {cell: [] for cell in cells}
        for number in range(args.passes):
            if args.passes > 1:
                print(f"pass {number + 1} of {args.passes}", flush=True)
            for cell in cells:
                result = await run_cell(
                    client, cell, by_name, bodies[cell], args.quiet_wait, args.gap_ms / 1000
                )
                passes[cell].append(result)
                _progress(summarize(result))
        results = [merged(parts) for parts in passes.values()]
        profile: dict[str, Any] = {}
        if args.py_spy and "ctxgate" in by_name:
            profile = await profile_ctxgate(
                client, by_name["ctxgate"], args.sizes, args.py_spy, args.profile_requests
            )
        return results, profile


def _progress(summary: dict[str, Any]) -> None:
    parts = [f"direct p50 {summary['targets']['direct']['p50']:.2f} ms"]
    for name, stats in summary["targets"].items():
        if name != "direct":
            text = f"{name} +{stats['added_p50']:.2f}/+{stats['added_p99']:.2f}"
            best = stats.get("best_floor", "floor")
            if summary["clients"] > 1 and "above_best_p50" in stats:
                text += f" ({stats['above_best_p50']:+.2f} ms vs {best})"
            elif math.isfinite(stats.get("best_ratio_p50", math.nan)):
                text += f" ({stats['best_ratio_p50']:.2f}x {best})"
            parts.append(text)
    other = f"other load {summary['foreign_before']:.2f}/{summary['foreign_cores']:.2f} CPUs"
    line = ", ".join(parts)
    print(f"{summary['cell']:>18}: {line} ({summary['wall_s']} s, {other})", flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N (~1-2 minutes)")
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="measure every cell this many times, spread over the run, and pool the samples",
    )
    p.add_argument("--n8k", type=int, help="sequential rounds at 8K (default 200)")
    p.add_argument("--n64k", type=int, help="sequential rounds at 64K (default 100)")
    p.add_argument("--rounds8k", type=int, help="concurrent rounds at 8K (default 20)")
    p.add_argument("--rounds64k", type=int, help="concurrent rounds at 64K (default 8)")
    p.add_argument("--concurrency", type=int, default=16, help="clients; 1 = sequential only")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument(
        "--bodies",
        nargs="+",
        choices=BODIES,
        default=list(BODIES),
        help="same: one body repeated; fresh: one no session has seen, every request; "
        "novel: one sharing not even its opening with an earlier one; "
        "growing: each session gains a turn per request",
    )
    p.add_argument("--proxies", nargs="+", choices=PROXIES, default=list(PROXIES))
    p.add_argument(
        "--only",
        type=_proxy_list,
        metavar="NAMES",
        help=f"comma-separated proxies to run, e.g. ctxgate,floor (of {','.join(PROXIES)}); "
        "overrides --proxies",
    )
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
        "--gap-ms",
        type=float,
        default=GAP_S * 1000,
        help="pause after each target's requests, as an agent's tool run (default %(default)s)",
    )
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
    if args.only:
        args.proxies = args.only
    if args.quiet_wait is None:
        args.quiet_wait = 5.0 if args.quick else 60.0
    return args


def _proxy_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROXIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown proxy {unknown}: choose from {PROXIES}")
    return names


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
    histories, tokens = build_histories(args.sizes)
    cells = plan(args)
    sim = simulator_service(run_dir, sys.executable, Path(__file__).resolve())
    upstream = sim.chat_url.removesuffix("/chat/completions")
    services = [sim]
    if "floor" in args.proxies:
        services.append(floor_service(run_dir, upstream))
    if "floor-aiohttp" in args.proxies:
        services.append(floor_service(run_dir, upstream, "aiohttp"))
    if "ctxgate" in args.proxies:
        services.append(ctxgate_service(run_dir, upstream, args.context_length))
    services += peer_services(args, run_dir, upstream)
    with running(services, args.startup_timeout) as up:
        results, profile = asyncio.run(measure(cells, up, histories, args))
        versions = {s.name: _version(s) for s in up}
    summaries = [summarize(r) for r in results]
    meta = run_meta(args, tokens, versions, run_dir, cells)
    report = markdown(summaries, cells, meta, profile_markdown(profile))
    print("\n" + report)
    raw = {"meta": meta, "cells": summaries, "profile": profile}
    raw["samples_ms"] = raw_samples(results)
    write_results(args, report, raw)
    return 0


def build_histories(sizes: Sequence[str]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Request bodies by `<size>-<mode>`, and each history's token and message count."""
    histories: dict[str, bytes] = {}
    tokens: dict[str, Any] = {}
    for size in sizes:
        messages, tools, count = build_history(SIZES[size])
        tokens[size] = {"tokens": count, "messages": len(messages)}
        histories[f"{size}-nonstream"] = request_body(messages, tools, False)
        histories[f"{size}-stream"] = request_body(messages, tools, True)
    if "8k-nonstream" not in histories:  # the smoke test uses it
        messages, tools, _ = build_history(SIZES["8k"])
        histories["8k-nonstream"] = request_body(messages, tools, False)
    return histories, tokens


def write_results(args: argparse.Namespace, report: str, raw: dict[str, Any]) -> None:
    stem = Path(
        args.out or REPO / "bench/results" / ("overhead-quick" if args.quick else "overhead")
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text(report)
    stem.with_suffix(".json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    print(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json')}")


def _version(svc: Service) -> str:
    if svc.name.startswith("floor"):
        import aiohttp
        import uvicorn

        client = f"aiohttp {aiohttp.__version__}" if svc.name == "floor-aiohttp" else ""
        return f"uvicorn {uvicorn.__version__}, httpx {httpx.__version__} {client}".strip()
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


if __name__ == "__main__":
    raise SystemExit(main())
