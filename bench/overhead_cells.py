"""One benchmark cell (size x stream x clients) and how its samples are taken."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from bench.overhead_requests import Bodies, request_headers, timed_request
from bench.overhead_services import Service, machine_cpu_s, own_cpu_s, wait_for_quiet

QUIET_CORES = 0.15  # other processes' CPU use (in cores) under which a cell may start
# Pause after each target's burst. An agent's next request follows its tool run, never the
# answer's last byte at once; what a proxy does once its client has the answer (ctxgate's
# session records and kept bodies) then runs in the pause, as in service, rather than on the
# next target's sample or on its own next one, on a 2-CPU machine where the client and the
# upstream take the other CPU.
GAP_S = 0.002
# CPU is read at the end of each of this many blocks of a cell's rounds: each block's CPU per
# request of a proxy, divided by the floor's over the same interleaved rounds, is one paired
# ratio, and the median of a cell's ratios is the figure a slow spell of the machine does not
# decide.
CPU_BLOCKS = 5


@dataclass(frozen=True)
class Cell:
    size: str
    stream: bool
    clients: int
    rounds: int
    warmup: int
    bodies: str = "same"  # one of overhead_requests.BODIES

    @property
    def name(self) -> str:
        mode = "stream" if self.stream else "nonstream"
        who = "seq" if self.clients == 1 else f"c{self.clients}"
        kind = "" if self.bodies == "same" else f"{self.bodies}-"
        return f"{self.size}-{kind}{mode}-{who}"


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
    # (rounds, CPU seconds by target) of each block of the cell's rounds, in order.
    cpu_blocks: list[tuple[int, dict[str, float]]] = field(default_factory=list)


async def _round(
    client: httpx.AsyncClient,
    cell: Cell,
    urls: dict[str, str],
    order: Sequence[str],
    bodies: Bodies,
    gap_s: float = GAP_S,
) -> dict[str, list[float | str]]:
    """One round: every target in `order` gets `cell.clients` simultaneous requests, then
    the round pauses `gap_s`."""
    out: dict[str, list[float | str]] = {}
    session = f"bench-{cell.name}"
    step = bodies.next_round()
    for target in order:
        sent = [bodies.get(step, i, session) for i in range(cell.clients)]
        calls = [
            timed_request(client, urls[target], body, request_headers(sid), cell.stream)
            for body, sid in sent
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        out[target] = [r if isinstance(r, float) else f"{type(r).__name__}: {r}" for r in results]
        if gap_s > 0:
            await asyncio.sleep(gap_s)
    return out


def round_orders(targets: Sequence[str]) -> list[list[str]]:
    """Orders for successive rounds in which every target goes first equally often and
    follows every other target equally often (a Williams design): whatever one burst leaves
    behind (a peer's late work, caches it evicted) lands on every other target alike.
    Rotating one fixed order would put each target behind the same neighbour every time."""
    n = len(targets)
    first = [0]
    for i in range(1, n):
        first.append((i + 1) // 2 if i % 2 else n - i // 2)
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:  # odd: the mirrored rows balance the pairs
        rows += [row[::-1] for row in rows]
    return [[targets[i] for i in row] for row in rows]


async def run_cell(
    client: httpx.AsyncClient,
    cell: Cell,
    services: dict[str, Service],
    bodies: Bodies,
    quiet_wait_s: float,
    gap_s: float = GAP_S,
) -> CellResult:
    urls = {name: svc.chat_url for name, svc in services.items()}
    targets = ["direct", *[n for n in urls if n != "direct"]]
    samples: dict[str, list[float]] = {t: [] for t in targets}
    errors: dict[str, list[str]] = {t: [] for t in targets}
    for _ in range(cell.warmup):
        await _round(client, cell, urls, targets, bodies, gap_s)
    quiet = wait_for_quiet(list(services.values()), quiet_wait_s, QUIET_CORES)
    listed = list(services.values())
    cpu0 = {n: svc.cpu_seconds() for n, svc in services.items()}
    machine0, own0 = machine_cpu_s(), own_cpu_s(listed)
    load0, wall0 = os.getloadavg()[0], time.perf_counter()
    orders = round_orders(targets)
    ends = block_ends(cell.rounds, CPU_BLOCKS)
    blocks: list[tuple[int, dict[str, float]]] = []
    mark, start = dict(cpu0), 0
    for r in range(cell.rounds):
        order = orders[r % len(orders)]
        for target, got in (await _round(client, cell, urls, order, bodies, gap_s)).items():
            samples[target].extend(v if isinstance(v, float) else math.nan for v in got)
            errors[target].extend(v for v in got if isinstance(v, str))
        if r + 1 in ends:
            now = {n: svc.cpu_seconds() for n, svc in services.items()}
            blocks.append((r + 1 - start, {n: now[n] - mark[n] for n in now}))
            mark, start = now, r + 1
    wall = time.perf_counter() - wall0
    cpu = {n: mark[n] - cpu0[n] for n in services}
    foreign = (machine_cpu_s() - machine0) - (own_cpu_s(listed) - own0)
    load = (load0, os.getloadavg()[0])
    return CellResult(
        cell, samples, errors, cpu, max(0.0, foreign) / wall, quiet, load, wall, blocks
    )


def block_ends(rounds: int, blocks: int) -> set[int]:
    """The rounds (counted from 1) after which a block of a cell's rounds ends: `blocks`
    blocks as even as `rounds` allows, never an empty one, the last ending with the cell."""
    count = max(1, min(blocks, rounds))
    return {rounds * (i + 1) // count for i in range(count)}


def merged(parts: Sequence[CellResult]) -> CellResult:
    """One cell measured in several passes, as one result: samples pooled, CPU and time summed.

    Passes spread over the run keep a slow spell of a shared machine (other tenants' load
    that this benchmark cannot see) from deciding a whole cell.
    """
    first = parts[0]
    wall = sum(p.wall_s for p in parts)
    return CellResult(
        cell=first.cell,
        samples={t: [v for p in parts for v in p.samples[t]] for t in first.samples},
        errors={t: [e for p in parts for e in p.errors[t]] for t in first.errors},
        cpu_s={t: sum(p.cpu_s[t] for p in parts) for t in first.cpu_s},
        foreign_cores=sum(p.foreign_cores * p.wall_s for p in parts) / max(wall, 1e-9),
        foreign_before=max(p.foreign_before for p in parts),
        load=(first.load[0], parts[-1].load[1]),
        wall_s=wall,
        cpu_blocks=[block for p in parts for block in p.cpu_blocks],
    )
