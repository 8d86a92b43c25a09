"""Large bodies, a large compression's stall, and 100,000 messages (docs/performance.md).

    .venv/bin/python bench/overhead_large.py             # ~5-10 minutes on 2 cores
    .venv/bin/python bench/overhead_large.py --rounds 6 --cells 200k-fresh,800k-same

Servers, each in its own process on 127.0.0.1 (as bench/overhead.py starts them): the provider
simulator (answers at once), the two floors (bare uvicorn relays: httpx and aiohttp), ctxgate
with a 1,048,576-token window (default settings: the compression pool on), and a second ctxgate
whose `server.max_messages` is below the message cell's count.

Cells:
- `200k` / `800k` x `fresh` (a body no session has seen: a new tag in its first user message,
  a new session id), `same` (a known session's identical body) and `growing` (one session
  gaining a turn each round): one client, the targets in alternation (direct, floor,
  floor-aiohttp, ctxgate). Per round: the time added over that round's direct call and the
  CPU each server process and its pool workers used from its request to its next one
  (scheduler figures in ns); medians, quartiles and extremes, the ratios on the medians.
  The 10 ms-tick CPU over the whole cell is kept beside as a check.
- `stall`: a first-seen ~780K-token history (past the 50% agent threshold of the 1M window,
  so compressed before it is forwarded) while another session sends a small request every
  20 ms: that session's latency before and during, and the large request's time added over
  direct.
- `messages`: 100,000 one-word user messages with the cap off (time to answer, /healthz
  polled every 20 ms throughout), and against the capped ctxgate (time to the 413).
The machine's load average is recorded before and after: the figures mean little on a busy
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.overhead_requests import API_KEY, MODEL, build_history, request_headers  # noqa: E402
from bench.overhead_services import (  # noqa: E402
    Service,
    _descendants,
    floor_service,
    free_port,
    running,
    simulator_service,
)

WINDOW = 1_048_576
CORPUS_PART = 190_000  # tokens of the corpus one copy of a large history takes
FLOORS = ("floor", "floor-aiohttp")


def large_history(tokens: int, tag: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An agent history of about `tokens`: the corpus's chained conversations, repeated with
    each copy's user words, tool outputs and call ids told apart, `tag` in the first user
    message (a body no session has seen)."""
    base, tools, size = build_history(min(tokens, CORPUS_PART))
    messages = list(base)
    copy = 1
    while size * copy < tokens:
        for m in base[1:]:
            if m.get("role") == "user":
                m = dict(m, content=f"(part {copy}) {m.get('content')}")
            elif m.get("role") == "tool":
                m = dict(m, content=f"{copy}: {m.get('content')}")
                m["tool_call_id"] = f"{m['tool_call_id']}_{copy}"
            elif m.get("tool_calls"):
                calls = [dict(c, id=f"{c['id']}_{copy}") for c in m["tool_calls"]]
                m = dict(m, tool_calls=calls)
            messages.append(m)
        copy += 1
    messages[1] = dict(messages[1], content=f"[{tag}] {messages[1].get('content')}")
    return messages, tools


def body(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": messages, "tools": tools})


def ctxgate(run_dir: Path, upstream: str, name: str, server: dict[str, Any]) -> Service:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, **server},
        "upstreams": {"sim": {"base_url": upstream, "api_key": API_KEY}},
        "models": [{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        "storage": {"url": f"sqlite+aiosqlite:///{run_dir}/{name}.db"},
        "logging": {"level": "warning"},
    }
    path = run_dir / f"{name}.yaml"
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(path)]
    base = f"http://127.0.0.1:{port}"
    env = {"PYTHONPATH": str(REPO)}
    return Service(
        name, argv, f"{base}/healthz", f"{base}/v1/chat/completions", run_dir / f"{name}.log", env
    )


async def post(client: httpx.AsyncClient, url: str, data: bytes, session: str) -> float:
    started = time.perf_counter()
    response = await client.post(url, content=data, headers=request_headers(session))
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
    return elapsed


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def precise_cpu_s(svc: Service) -> float:
    """CPU seconds of `svc`'s process and its descendants (the pool's workers), from each
    thread's scheduler figures in nanoseconds: the 10 ms ticks of /proc/PID/stat are coarser
    than one request's work. Threads that ended take their time with them; the tick figure
    over the whole cell (`cpu_ms_per_request`) is kept beside as a check."""
    if svc.proc is None:
        return 0.0
    total = 0
    for pid in _descendants(svc.proc.pid):
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles and extremes of per-round figures."""
    if not values:
        return {}
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"p50": q[1], "p25": q[0], "p75": q[2], "min": ordered[0], "max": ordered[-1]}


async def large_cell(
    client: httpx.AsyncClient,
    targets: dict[str, Service | None],
    direct_url: str,
    size: int,
    kind: str,
    rounds: int,
) -> dict[str, Any]:
    """One client, every target in turn each round; the first round warms up (excluded).

    Latency added: each round's time less that round's direct call. CPU per request: what
    each server process (its pool workers included) used from just before its request to
    just before its request of the next round, so work left running after an answer (the
    ledger's, the archive's) is charged to the request that caused it."""
    samples: dict[str, list[float]] = {name: [] for name in targets}
    cpu: dict[str, float] = {}
    marks: dict[str, list[float]] = {n: [] for n, s in targets.items() if s is not None}
    messages, tools = large_history(size, f"{kind}-{time.time_ns()}")
    growing = list(messages)
    for round_ in range(rounds + 1):
        if round_ == 1:
            cpu = {n: s.cpu_seconds() for n, s in targets.items() if s is not None}
        for name, svc in targets.items():
            url = svc.chat_url if svc is not None else direct_url
            if kind == "fresh":
                tagged = list(messages)
                tagged[1] = dict(tagged[1], content=f"[{name}-{round_}-{time.time_ns()}] x")
                data, session = body(tagged, tools), f"fresh-{name}-{round_}-{time.time_ns()}"
            elif kind == "same":
                data, session = body(messages, tools), f"same-{size}"
            else:
                data, session = body(growing, tools), f"grow-{size}-{name}"
            if svc is not None and round_:
                marks[name].append(precise_cpu_s(svc))
            elapsed = await post(client, url, data, session)
            if round_:
                samples[name].append(elapsed)
        if kind == "growing":
            growing += [
                {"role": "assistant", "content": f"Done step {round_}."},
                {"role": "user", "content": f"Next, step {round_ + 1}, please."},
            ]
    await asyncio.sleep(1.0)  # the last round's work after its answer
    for name, svc in targets.items():
        if svc is not None:
            marks[name].append(precise_cpu_s(svc))
    used = {n: (s.cpu_seconds() - cpu[n]) / rounds for n, s in targets.items() if s is not None}
    per_round = {
        n: [(b - a) * 1000 for a, b in zip(m, m[1:], strict=False)] for n, m in marks.items()
    }
    cpu_p50 = {n: p50(v) for n, v in per_round.items()}
    direct = samples["direct"]
    paired = {
        n: [(t - d) * 1000 for t, d in zip(v, direct, strict=True)]
        for n, v in samples.items()
        if n != "direct"
    }
    added = {n: p50(v) for n, v in paired.items()}
    return {
        "cell": f"{size // 1000}k-{kind}",
        "rounds": rounds,
        "direct_p50_ms": p50(direct) * 1000,
        "added_p50_ms": added,
        "added_spread_ms": {n: spread(v) for n, v in paired.items()},
        "cpu_p50_ms": cpu_p50,
        "cpu_spread_ms": {n: spread(v) for n, v in per_round.items()},
        "cpu_ms_per_request": {n: v * 1000 for n, v in used.items()},
        "ratio_to_floor": {f: added["ctxgate"] / added[f] for f in FLOORS if added.get(f, 0) > 0},
        "cpu_ratio_to_floor": {
            f: cpu_p50["ctxgate"] / cpu_p50[f] for f in FLOORS if cpu_p50.get(f, 0) > 0
        },
    }


async def probe(client: httpx.AsyncClient, url: str, data: bytes | None, out: list[float]) -> None:
    """A small request (or a GET of /healthz) every 20 ms until cancelled; latencies in `out`."""
    while True:
        started = time.perf_counter()
        if data is None:
            await client.get(url)
        else:
            await client.post(url, content=data, headers=request_headers("small-session"))
        out.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def stall_cell(
    client: httpx.AsyncClient, direct_url: str, svc: Service, runs: int
) -> dict[str, Any]:
    small_messages, small_tools = large_history(2_000, "small")
    small = body(small_messages[:6], small_tools)
    before: list[float] = []
    during: list[float] = []
    added: list[float] = []
    async with httpx.AsyncClient(timeout=120, trust_env=False) as side:
        task = asyncio.create_task(probe(side, svc.chat_url, small, before))
        await asyncio.sleep(2.0)
        task.cancel()
        for run in range(runs):
            messages, tools = large_history(780_000, f"stall-{run}-{time.time_ns()}")
            data = body(messages, tools)
            direct = await post(client, direct_url, data, f"direct-{run}")
            seen: list[float] = []
            task = asyncio.create_task(probe(side, svc.chat_url, small, seen))
            elapsed = await post(client, svc.chat_url, data, f"stall-{run}-{time.time_ns()}")
            task.cancel()
            during += seen
            added.append((elapsed - direct) * 1000)
    return {
        "cell": "stall-780k",
        "small_p50_before_ms": p50(before) * 1000,
        "small_max_before_ms": max(before) * 1000,
        "small_p50_during_ms": p50(during) * 1000,
        "small_max_during_ms": max(during) * 1000,
        "large_added_ms": added,
    }


async def messages_cell(
    client: httpx.AsyncClient, open_svc: Service, capped: Service, count: int
) -> dict[str, Any]:
    messages = [{"role": "system", "content": "You are terse."}]
    messages += [{"role": "user", "content": f"w{i}"} for i in range(count)]
    data = orjson.dumps({"model": MODEL, "messages": messages})
    health: list[float] = []
    async with httpx.AsyncClient(timeout=120, trust_env=False) as side:
        health_url = open_svc.health_url
        task = asyncio.create_task(probe(side, health_url, None, health))
        elapsed = await post(client, open_svc.chat_url, data, f"words-{time.time_ns()}")
        task.cancel()
    started = time.perf_counter()
    refused = await client.post(capped.chat_url, content=data, headers=request_headers("cap"))
    refusal = time.perf_counter() - started
    return {
        "cell": f"messages-{count // 1000}k",
        "answered_s": elapsed,
        "healthz_max_ms": max(health) * 1000 if health else None,
        "refused_status": refused.status_code,
        "refused_ms": refusal * 1000,
    }


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Load average before {meta['load_before']}, after {meta['load_after']} "
        f"({meta['cores']} cores).",
        "",
        "Per round: latency added over that round's direct call; CPU (ns scheduler figures) of "
        "each server and its pool workers from one request to the next. Medians, p25-p75 in "
        "brackets.",
        "",
        "| cell | rounds | direct p50 ms | added ms: ctxgate / floor / floor-aiohttp "
        "| ratio to floor / aiohttp | CPU ms per request: ctxgate / floor / aiohttp "
        "| CPU ratio to floor / aiohttp |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "added_p50_ms" not in r:
            continue
        ratio, cpu = r["ratio_to_floor"], r["cpu_ratio_to_floor"]
        added = " / ".join(_median(r["added_spread_ms"][n]) for n in SERVERS)
        used = " / ".join(_median(r["cpu_spread_ms"][n]) for n in SERVERS)
        lines.append(
            f"| {r['cell']} | {r['rounds']} | {r['direct_p50_ms']:.1f} | {added} "
            f"| {ratio.get('floor', 0):.2f}x / {ratio.get('floor-aiohttp', 0):.2f}x "
            f"| {used} | {cpu.get('floor', 0):.2f}x / {cpu.get('floor-aiohttp', 0):.2f}x |"
        )
    lines.append("")
    for r in results:
        if "added_p50_ms" not in r:
            lines.append("- " + ", ".join(f"{k}: {_fmt(v)}" for k, v in r.items()))
    return "\n".join(lines)


SERVERS = ("ctxgate", *FLOORS)


def _median(s: dict[str, float]) -> str:
    if not s:
        return "-"
    return f"{s['p50']:.1f} ({s['p25']:.1f}-{s['p75']:.1f})"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


async def measure(services: dict[str, Service], args: argparse.Namespace) -> list[dict[str, Any]]:
    direct_url = services["simulator"].chat_url
    results: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        targets: dict[str, Service | None] = {
            "direct": None,
            "floor": services["floor"],
            "floor-aiohttp": services["floor-aiohttp"],
            "ctxgate": services["ctxgate"],
        }
        for cell in args.cells:
            if cell == "stall":
                results.append(await stall_cell(client, direct_url, services["ctxgate"], 3))
            elif cell == "messages":
                capped = services["ctxgate-capped"]
                results.append(
                    await messages_cell(client, services["ctxgate"], capped, args.messages)
                )
            else:
                size, kind = cell.split("-")
                tokens = int(size.removesuffix("k")) * 1000
                results.append(
                    await large_cell(client, targets, direct_url, tokens, kind, args.rounds)
                )
            print(json.dumps(results[-1]), flush=True)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument(
        "--cells",
        default="200k-fresh,200k-same,200k-growing,800k-same,800k-growing,stall,messages",
    )
    p.add_argument("--out", default=str(REPO / "bench/results/overhead-large"))
    args = p.parse_args()
    args.cells = [c for c in args.cells.split(",") if c]
    run_dir = Path(f"/tmp/bench-overhead/large-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    sim = simulator_service(run_dir, sys.executable, REPO / "bench" / "overhead.py")
    upstream = sim.chat_url.removesuffix("/chat/completions")
    services = [
        sim,
        floor_service(run_dir, upstream),
        floor_service(run_dir, upstream, "aiohttp"),
        ctxgate(run_dir, upstream, "ctxgate", {"max_messages": 0}),
        ctxgate(run_dir, upstream, "ctxgate-capped", {"max_messages": args.messages // 2}),
    ]
    load_before = os.getloadavg()
    with running(services, 180) as up:
        results = asyncio.run(measure({s.name: s for s in up}, args))
    meta = {
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }
    report = markdown(results, meta)
    print("\n" + report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(report + "\n")
    out.with_suffix(".json").write_bytes(
        orjson.dumps({"meta": meta, "cells": results}, option=orjson.OPT_INDENT_2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
