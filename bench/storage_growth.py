"""How fast the store grows, and what retention keeps it to.

    python bench/storage_growth.py [--sessions 4] [--turns 50] [--window 16384]
                                   [--days 30] [--per-day 10] [--idle-days 0 7]

1. Bytes per 1,000 turns: `--sessions` agents of `--turns` requests each go through ctxgate
   (a real server on a loopback port, the provider simulator as the model, a `--window`-token
   model so that compressions happen) into a fresh SQLite file; the file's used pages are
   divided by the turns. Per-table shares come from SQLite's dbstat table when it is built in.
2. A simulated month: the writes one of those sessions made (its checkpoints, archive, events
   and usage, in order) are replayed through the store API as `--per-day` new sessions a day
   for `--days` days, on a simulated clock (a turn a minute, sessions spread over the day);
   the retention sweep runs every simulated hour under its lease, as the server runs it. Once
   per `--idle-days` value (0: retention off), the database's size at the end of each week is
   printed: bytes in use, and the file's size on disk (incremental vacuum gives space back).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import select

from storage import (
    CompressionCommit,
    EventRecord,
    RetentionPolicy,
    SessionKey,
    SessionStore,
    Sweeper,
    UsageRecord,
    codec,
)
from storage.database.db import Database
from storage.database.tables import archived_messages, checkpoints, events, sessions, usage
from storage.rows import retention
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

DAY = 86_400.0
MODEL = "growth-bench"
TURN_S = 60.0  # simulated seconds between a session's requests


# -- the sizes of a SQLite file --------------------------------------------------------------


def used_bytes(path: Path) -> int:
    """Bytes of the pages in use (the file less its free pages), WAL copied in first."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    return int((pages - free) * size)


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def table_shares(path: Path) -> list[tuple[str, int]]:
    """Bytes per table with its indexes (empty when SQLite lacks dbstat)."""
    try:
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT m.tbl_name, sum(s.pgsize) FROM dbstat AS s "
                "JOIN sqlite_schema AS m ON m.name = s.name GROUP BY m.tbl_name "
                "ORDER BY 2 DESC"
            ).fetchall()
    except sqlite3.Error:
        return []
    return [(str(name), int(size)) for name, size in rows]


# -- 1. through the proxy ----------------------------------------------------------------------


def through_the_proxy(
    tmp: Path, sessions_n: int, turns: int, window: int
) -> tuple[Path, int, float]:
    """Run the agents through ctxgate; the database, its turns and the seconds it took."""
    db = tmp / "proxy.db"
    with Simulator(models={MODEL: ModelSpec(window=window)}, chunk_delay_s=0.0) as sim:
        settings = settings_for(
            sim.base_url,
            str(db),
            models=[{"match": "*", "upstream": "sim", "context_length": window}],
            compression={"background": False},
            storage={"retention": {"session_idle_days": 0}},
        )
        started = time.perf_counter()
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-bench", max_retries=0)
            loops = [AgentLoop(client, MODEL, session_id=f"agent-{n}") for n in range(sessions_n)]
            loops[0].script(sim)
            for step in range(turns):
                for loop in loops:
                    loop.step(step)
            proxy.run(proxy.services.store.flush())
        return db, sessions_n * turns, time.perf_counter() - started


# -- 2. a simulated month through the store API -----------------------------------------------


@dataclass(frozen=True)
class Write:
    """One write of a recorded session: at its turn, a usage record or a compression."""

    turn: int
    usage: UsageRecord | None = None
    commit: CompressionCommit | None = None


async def recorded(path: Path) -> tuple[list[Write], int]:
    """The writes of the proxy run's first session, as a template; and its turns."""
    db = Database.connect(f"sqlite+aiosqlite:///{path}")
    try:
        return await db.read(_template)
    finally:
        await db.dispose()


async def _template(conn: Any) -> tuple[list[Write], int]:
    row = (await conn.execute(select(sessions).order_by(sessions.c.id).limit(1))).mappings().one()
    sid, sk = row["id"], SessionKey(row["scope"], row["key"])
    used = (
        await conn.execute(select(usage).where(usage.c.session_id == sid).order_by(usage.c.at))
    ).mappings()
    times = []
    writes = []
    for n, u in enumerate(used):
        times.append(u["at"])
        record = UsageRecord(
            sk, row["model"], u["prompt_tokens"], u["completion_tokens"], u["message_count"]
        )
        writes.append(Write(n, usage=record))
    found = await conn.execute(
        select(checkpoints).where(checkpoints.c.session_id == sid).order_by(checkpoints.c.id)
    )
    for c in found.mappings().all():
        archived = await conn.execute(
            select(archived_messages.c.position, archived_messages.c.message).where(
                archived_messages.c.checkpoint_id == c["id"]
            )
        )
        event = (
            (await conn.execute(select(events).where(events.c.checkpoint_id == c["id"])))
            .mappings()
            .first()
        )
        turn = sum(1 for t in times if t <= c["created_at"])
        writes.append(Write(turn, commit=_commit(sk, row, c, archived.all(), event)))
    writes.sort(key=lambda w: (w.turn, w.usage is not None))
    return writes, len(times)


def _commit(sk: SessionKey, row: Any, c: Any, archived: list[Any], event: Any) -> CompressionCommit:
    e = EventRecord(
        sk,
        event["trigger"] if event else "agent",
        event["outcome"] if event else "ok",
        c["tokens_before"],
        c["tokens_after"],
        event["messages_before"] if event else 0,
        event["messages_after"] if event else 0,
        event["duration_ms"] if event else 0.0,
    )
    return CompressionCommit(
        sk=sk,
        model=row["model"],
        prefix_len=c["prefix_len"],
        prefix_digest=c["prefix_digest"],
        messages=codec.loads(c["messages"]),
        summary=c["summary"],
        tokens_before=c["tokens_before"],
        tokens_after=c["tokens_after"],
        archived=[(a.position, codec.loads(a.message)) for a in archived],
        event=e,
        engine_state=codec.loads(row["engine_state"]),
        sources=codec.loads(c["sources"]) if c["sources"] else None,
    )


class SimClock:
    def __init__(self) -> None:
        self.now = 1_767_225_600.0  # 2026-01-01 00:00 UTC

    def __call__(self) -> float:
        return self.now


@dataclass
class Month:
    idle_days: float
    weekly: list[tuple[int, int, int]]  # (day, bytes in use, file bytes)
    turns: int
    longest_batch_s: float
    sweep_s: float
    vacuum_s: float
    seconds: float
    convert_s: float | None = None  # one VACUUM to incremental auto-vacuum, of the end file


async def month(
    tmp: Path, template: list[Write], days: int, per_day: int, idle_days: float, purge_rows: int
) -> Month:
    path = tmp / f"month-{idle_days:g}.db"
    clock = SimClock()
    start = clock.now
    store = await SessionStore.open(f"sqlite+aiosqlite:///{path}", clock=clock)
    policy = RetentionPolicy(idle_days * DAY, interval_s=3600.0, purge_rows=purge_rows)
    sweeper = Sweeper(store, policy, owner="bench") if idle_days > 0 else None
    weekly: list[tuple[int, int, int]] = []
    turns, longest, sweep_s, vacuum_s = 0, 0.0, 0.0, 0.0
    started = time.perf_counter()
    try:
        for day in range(days):
            for n in range(per_day):
                begin = start + day * DAY + n * DAY / per_day
                sk = SessionKey("bench", f"d{day}-s{n}")
                turns += await replay(store, clock, template, sk, begin)
                # The sweeper wakes every simulated hour that passed meanwhile.
                if sweeper is not None:
                    report = await sweeper.sweep_if_due()
                    if report is not None:
                        longest = max(longest, report.longest_write_s)
                        sweep_s += report.seconds
                        vacuum_s += report.vacuum_s
            if (day + 1) % 7 == 0 or day + 1 == days:
                await store.flush()
                weekly.append((day + 1, used_bytes(path), file_bytes(path)))
    finally:
        await store.close()
    seconds = time.perf_counter() - started
    convert_s = await converted(path) if sweeper is None else None
    return Month(idle_days, weekly, turns, longest, sweep_s, vacuum_s, seconds, convert_s)


async def converted(path: Path) -> float | None:
    """How long the first sweep's switch of this file to incremental vacuum takes."""
    db = Database.connect(f"sqlite+aiosqlite:///{path}")
    try:
        return await retention.make_incremental(db)
    finally:
        await db.dispose()


async def replay(
    store: SessionStore, clock: SimClock, template: list[Write], sk: SessionKey, begin: float
) -> int:
    """The template's writes for session `sk`, a turn a minute from `begin`; its turns."""
    turns = 0
    for w in template:
        clock.now = begin + w.turn * TURN_S
        if w.usage is not None:
            await store.record_usage(
                UsageRecord(
                    sk,
                    w.usage.model,
                    w.usage.prompt_tokens,
                    w.usage.completion_tokens,
                    w.usage.message_count,
                )
            )
            turns += 1
        elif w.commit is not None:
            c = w.commit
            await store.commit_compression(
                CompressionCommit(
                    sk=sk,
                    model=c.model,
                    prefix_len=c.prefix_len,
                    prefix_digest=c.prefix_digest,
                    messages=c.messages,
                    summary=c.summary,
                    tokens_before=c.tokens_before,
                    tokens_after=c.tokens_after,
                    archived=c.archived,
                    event=EventRecord(**{**_fields(c.event), "sk": sk}),
                    engine_state=c.engine_state,
                    sources=c.sources,
                )
            )
    return turns


def _fields(e: EventRecord) -> dict[str, Any]:
    return {name: getattr(e, name) for name in EventRecord.__dataclass_fields__}


# -- report --------------------------------------------------------------------------------------


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--window", type=int, default=16384)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=10)
    parser.add_argument("--idle-days", type=float, nargs="+", default=[0, 7])
    parser.add_argument("--purge-rows", type=int, default=RetentionPolicy(0).purge_rows)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        db, turns, took = through_the_proxy(tmp, args.sessions, args.turns, args.window)
        used = used_bytes(db)
        print(
            f"through ctxgate: {args.sessions} sessions x {args.turns} turns "
            f"({args.window}-token window) in {took:.1f} s: {mb(used)} in use, "
            f"{used * 1000 / turns / 1e6:.2f} MB per 1,000 turns "
            f"({used / args.sessions / 1e3:.0f} KB per session)"
        )
        for name, size in table_shares(db)[:6]:
            print(f"  {name:<20} {size / used:6.1%}")
        template, template_turns = asyncio.run(recorded(db))
        commits = sum(1 for w in template if w.commit is not None)
        print(
            f"\nsimulated month: {args.per_day} sessions/day for {args.days} days, each the "
            f"first session's writes ({template_turns} turns, {commits} compressions), "
            "swept every simulated hour"
        )
        months = [
            asyncio.run(month(tmp, template, args.days, args.per_day, i, args.purge_rows))
            for i in args.idle_days
        ]
        print(
            f"{'retention':<12}" + "".join(f"{'day ' + str(d):>22}" for d, _, _ in months[0].weekly)
        )
        for m in months:
            label = "off" if m.idle_days <= 0 else f"{m.idle_days:g} days"
            cells = "".join(f"{mb(u) + ' / ' + mb(f):>22}" for _, u, f in m.weekly)
            print(f"{label:<12}{cells}")
            end_used, end_file = m.weekly[-1][1], m.weekly[-1][2]
            print(
                f"{'':<12}end: {mb(end_used)} in use, {mb(end_file)} on disk, "
                f"{end_used * 1000 / m.turns / 1e6:.2f} MB per 1,000 turns sent; "
                f"run {m.seconds:.0f} s"
            )
            if m.convert_s is None:
                print(
                    f"{'':<12}sweeps {m.sweep_s:.1f} s in all ({m.vacuum_s:.1f} s of it "
                    f"incremental vacuum), longest write transaction "
                    f"{m.longest_batch_s * 1e3:.0f} ms"
                )
            else:
                print(
                    f"{'':<12}switching this {mb(end_file)} file to incremental vacuum (the first "
                    f"sweep on a file made without it): one VACUUM of {m.convert_s:.1f} s"
                )
        print("(cells: bytes in use / file on disk, WAL included, at the end of each week)")


if __name__ == "__main__":
    main()
