"""The cost of recall before asking (session/recall/ahead.py), where it runs.

    .venv/bin/python -m bench.overhead_recall                 # ~2 minutes on 2 cores
    .venv/bin/python -m bench.overhead_recall --rounds 60     # shorter

Recall before asking searches a session's archive only once the session has one: after its
first compression. Two ctxgate servers (`ctxgate`, defaults; `ctxgate-noahead`,
`compression.recall.ahead: false`) each hold the same session: the 8K agent history of
bench/overhead.py, sent once, then compressed through the manual API (`POST
/v1/sessions/{id}/compress`), so its early turns are archived. Then every round the session
gains a turn, as an agent's does: the assistant's short answer and a user question naming one
of the identifiers (reservation, flight, user ids) that the archived turns hold, so each request
has a newest turn for recall before asking to look up. Every round goes to the direct URL, the
httpx floor and both servers (each gets the same body, in a balanced order), and the cell
reports what each adds over the direct call and CPU per request, medians of blocks of rounds
(bench/overhead_cells.py). The difference between the two ctxgate servers is the feature's
cost; the count of its `recall-ahead` events says how often it placed a passage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench`, `compression`, `tests` importable
    sys.path.insert(0, str(REPO))

from bench.overhead_cells import Cell, run_cell  # noqa: E402
from bench.overhead_report import percentile, summarize  # noqa: E402
from bench.overhead_requests import (  # noqa: E402
    SIZES,
    build_history,
    request_body,
    request_headers,
    timed_request,
)
from bench.overhead_services import (  # noqa: E402
    Service,
    ctxgate_service,
    floor_service,
    running,
    simulator_service,
)

SESSION = "bench-recall"
OFF = "ctxgate-noahead"
# The history's first turns: what a compression of it archives (its head and tail stay).
ARCHIVED_TURNS = 30
# The model's window: the 8K history is past its agent threshold (50%), and the session's
# compressed view, grown by a turn per round, stays under it for a few hundred rounds.
WINDOW = 16_384


def archived_names(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Identifiers the history's early turns name (what the questions will ask about)."""
    from compression import content_text, find_anchors

    names: dict[str, None] = {}
    for message in messages[1:ARCHIVED_TURNS]:
        for name in find_anchors(content_text(cast(Any, message))):
            names.setdefault(name, None)
    return list(names)


class AskingBodies:
    """One session gaining a turn per round: an answer, then a question naming an archived
    identifier (the same bytes for every target of a round)."""

    def __init__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.messages, self.tools = list(messages), tools
        self.names = archived_names(messages)
        self.rounds = 0
        self._bodies: dict[int, bytes] = {}

    def next_round(self) -> int:
        self.rounds += 1
        return self.rounds - 1

    def get(self, step: int, client: int, session: str) -> tuple[bytes, str]:
        while len(self._bodies) <= step:
            n = len(self._bodies)
            name = self.names[n % len(self.names)]
            self.messages += [
                {"role": "assistant", "content": f"Done with step {n}."},
                {"role": "user", "content": f"What did we find for {name} earlier, at step {n}?"},
            ]
            self._bodies[n] = request_body(self.messages, self.tools, False)
        return self._bodies[step], SESSION


async def prepare(client: httpx.AsyncClient, svc: Service, body: bytes) -> dict[str, Any]:
    """The session's first request, then its compression through the manual API (or the
    one its first request started, past the agent threshold)."""
    await timed_request(client, svc.chat_url, body, request_headers(SESSION), False)
    root = svc.chat_url.removesuffix("/chat/completions")
    answer = await client.post(f"{root}/sessions/{SESSION}/compress", headers=request_headers(""))
    done: dict[str, Any] = answer.json()
    if answer.status_code >= 300 or not (done.get("compressed") or done.get("checkpoint_id")):
        raise SystemExit(f"{svc.name}: the session was not compressed: {answer.text}")
    return done


def events(run_dir: Path, name: str) -> dict[str, int]:
    """How many events of each trigger a server's database holds."""
    with sqlite3.connect(run_dir / name / "ctxgate.db") as db:
        rows = db.execute("SELECT trigger, count(*) FROM events GROUP BY trigger").fetchall()
    return {str(trigger): int(count) for trigger, count in rows}


async def measure(services: list[Service], args: argparse.Namespace) -> dict[str, Any]:
    messages, tools, _ = build_history(SIZES["8k"])
    base = request_body(messages, tools, False)
    by_name = {("direct" if s.name == "simulator" else s.name): s for s in services}
    limits = httpx.Limits(max_keepalive_connections=16, keepalive_expiry=3.0)
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        compressed = {n: await prepare(client, by_name[n], base) for n in ("ctxgate", OFF)}
        bodies = AskingBodies(messages, tools)
        cell = Cell("8k", False, 1, args.rounds, 0, "recall")
        result = await run_cell(client, cell, by_name, bodies, args.quiet_wait)  # type: ignore[arg-type]
    summary = summarize(result)
    return {"summary": summary, "compressed": compressed, "names": bodies.names[:8]}


def report(found: dict[str, Any], run_dir: Path) -> str:
    summary = found["summary"]
    targets = summary["targets"]
    on, off = targets["ctxgate"], targets[OFF]
    pairs = zip(on["cpu_ms_blocks"], off["cpu_ms_blocks"], strict=True)
    ratios = [a / b for a, b in pairs if b > 0]
    placed = {n: events(run_dir, n).get("recall-ahead", 0) for n in ("ctxgate", OFF)}
    lines = [
        "## Recall before asking: its cost where it runs (8K session with an archive)",
        "",
        f"{summary['samples_per_target']} rounds, load average {summary['load1'][0]:.2f} before "
        f"/ {summary['load1'][1]:.2f} after, other load {summary['foreign_cores']:.2f} CPUs.",
        "",
        "| target | added p50 ms | added p90 ms | CPU ms per request (median of blocks) |",
        "|---|---|---|---|",
    ]
    for name in ("floor", OFF, "ctxgate"):
        stats = targets[name]
        cpu = stats.get("cpu_ms_median", stats["cpu_ms_per_request"])
        lines.append(
            f"| {name} | {stats['added_p50']:+.2f} | {stats['added_p90']:+.2f} | {cpu:.3f} |"
        )
    extra_ms = on.get("cpu_ms_median", 0.0) - off.get("cpu_ms_median", 0.0)
    lines += [
        "",
        f"Recall before asking adds {on['p50'] - off['p50']:+.2f} ms p50 and "
        f"{extra_ms:+.3f} ms of CPU per request (CPU x{percentile(ratios, 50):.2f} the same "
        f"session with it off, blocks {min(ratios):.2f}–{max(ratios):.2f}); it placed passages "
        f"in {placed['ctxgate']} of {summary['samples_per_target']} requests "
        f"(ahead off: {placed[OFF]}).",
        "",
        f"The manual compressions: {json.dumps(found['compressed'])}",
        f"Identifiers asked about (first 8): {', '.join(found['names'])}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=150, help="requests per target")
    p.add_argument("--quiet-wait", type=float, default=10.0)
    p.add_argument(
        "--context-length",
        type=int,
        default=WINDOW,
        help="the model's window: small enough that the 8K history can be compressed",
    )
    p.add_argument("--out", help="output stem (default bench/results/overhead-recall)")
    args = p.parse_args(argv)
    run_dir = Path(f"/tmp/bench-overhead/recall-{time.strftime('%Y%m%d-%H%M%S')}")
    for name in ("ctxgate", OFF):
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    script = REPO / "bench" / "overhead.py"
    sim = simulator_service(run_dir, sys.executable, script)
    upstream = sim.chat_url.removesuffix("/chat/completions")
    window = args.context_length
    on = ctxgate_service(run_dir / "ctxgate", upstream, window)
    off = ctxgate_service(run_dir / OFF, upstream, window, {"recall": {"ahead": False}})
    off.name = OFF
    services = [sim, floor_service(run_dir, upstream), on, off]
    with running(services, 120.0) as up:
        found = asyncio.run(measure(up, args))
    text = report(found, run_dir)
    print(text)
    stem = Path(args.out or REPO / "bench/results/overhead-recall")
    stem.with_suffix(".md").write_text(text)
    raw = {k: v for k, v in found.items()}
    stem.with_suffix(".json").write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
