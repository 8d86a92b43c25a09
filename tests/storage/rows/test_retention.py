"""Retention: idle sessions go with everything they own, live ones stay whole, usage survives
as daily totals, one sweeper at a time, in bounded batches, and SQLite gives the space back."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
from sqlalchemy import text

from storage import (
    Fork,
    RetentionPolicy,
    SessionKey,
    SessionStore,
    Sweeper,
    UsageRecord,
    daily_usage,
)
from storage.database.db import Database
from storage.rows import retention
from storage.rows.retention import daily_totals, turn_holder
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator
from tests.storage.factories import FakeClock, chain_digests, commit, history

DAY = 86_400.0
MONTH = 30 * DAY
TABLES = ("sessions", "checkpoints", "archived_messages", "events", "usage", "archive_search")


async def counts(url: str, root: str | None = None) -> dict[str, int]:
    """Rows per table: all of them, or only those of the session id `root` (every lineage)."""
    db = Database.connect(url)
    ids = "SELECT id FROM sessions WHERE root_key = :root"
    archive_key = "rowid" if db.dialect == "sqlite" else "id"
    where = {
        "sessions": f"id IN ({ids})",
        "archive_search": f"{archive_key} IN "
        f"(SELECT id FROM archived_messages WHERE session_id IN ({ids}))",
    }

    async def count(conn: Any) -> dict[str, int]:
        found = {}
        for table in TABLES:
            condition = where.get(table, f"session_id IN ({ids})") if root else "1 = 1"
            sql = f"SELECT count(*) FROM {table} WHERE {condition}"
            found[table] = (await conn.execute(text(sql), {"root": root})).scalar_one()
        key = "key = :root OR key LIKE :forks" if root else "1 = 1"
        sql = f"SELECT count(*) FROM leases WHERE {key}"
        params = {"root": root, "forks": f"{root}#%"}
        found["leases"] = (await conn.execute(text(sql), params)).scalar_one()
        return found

    try:
        return await db.read(count)
    finally:
        await db.dispose()


async def conversation(store: SessionStore, root: str, *, fork: bool = True) -> None:
    """A session with what a real one accumulates: two compressions (one rotating), archived
    originals, events, usage, a lease and a fork."""
    sk = SessionKey("anon", root)
    messages = history(24, tag=root)
    digests = chain_digests(messages)
    archived = [(p, messages[p]) for p in range(1, 8)]
    await store.commit_compression(commit(sk, digests, 8, archived=archived))
    await store.commit_compression(
        commit(
            sk,
            digests,
            16,
            archived=[(p, messages[p]) for p in range(8, 15)],
            rotate_to=f"{root}.2",
        )
    )
    for n in range(3):
        await store.record_usage(UsageRecord(sk, "gpt-test", 1000 + n, 100, 20 + n))
    assert await store.acquire_lease(sk, "worker", 30.0)
    if fork:
        await store.fork_lineage(
            Fork(sk, f"{root}#b", "gpt-test", f"{root}.2", 10, 12, digests[11], {}, 4)
        )
        await store.record_usage(UsageRecord(SessionKey("anon", f"{root}#b"), "gpt-test", 7, 3, 12))


def sweeper(store: SessionStore, idle_s: float = MONTH, **options: Any) -> Sweeper:
    return Sweeper(store, RetentionPolicy(idle_s, **options), owner="me")


async def test_an_idle_session_goes_with_everything_it_owns_and_a_live_one_stays(
    store: SessionStore, store_url: str, clock: FakeClock
) -> None:
    await conversation(store, "old")
    await conversation(store, "live")
    old = await counts(store_url, "old")
    assert all(old[table] for table in (*TABLES, "leases")), old
    clock.advance(MONTH + DAY)
    await store.record_usage(UsageRecord(SessionKey("anon", "live"), "gpt-test", 5, 1, 30))
    live = await counts(store_url, "live")

    report = await sweeper(store).sweep()

    assert (report.sessions, report.rows) == (1, 3)  # the session, its rotation, its fork
    assert report.usage_rows == old["usage"]
    assert await counts(store_url) == live  # nothing of "old" is left anywhere
    assert await counts(store_url, "live") == live
    assert await store.get_session(SessionKey("anon", "old")) is None
    assert await store.archived_messages(SessionKey("anon", "old.2")) == []
    assert len(await store.lineage_archive(SessionKey("anon", "live.2"))) == 14


async def test_usage_survives_as_daily_totals(store: SessionStore, clock: FakeClock) -> None:
    await conversation(store, "old", fork=False)
    clock.advance(DAY)
    await store.record_usage(UsageRecord(SessionKey("anon", "old"), "gpt-test", 50, 5, 30))
    clock.advance(MONTH + DAY)
    await sweeper(store).sweep()
    kept = await daily_usage(store)
    assert [(d.requests, d.prompt_tokens, d.completion_tokens) for d in kept] == [
        (3, 3003, 300),
        (1, 50, 5),
    ]
    assert kept[0].model == "gpt-test" and kept[0].scope == "anon"
    assert kept[1].day > kept[0].day
    # A second session's usage on the same day adds to the same total.
    day_two = clock.now
    await store.record_usage(UsageRecord(SessionKey("anon", "other"), "gpt-test", 1, 1, 2))
    clock.now = day_two + MONTH + DAY
    await sweeper(store).sweep()
    assert [d.requests for d in await daily_usage(store, since=kept[1].day)][-1] >= 1


async def test_without_daily_usage_nothing_is_kept(store: SessionStore, clock: FakeClock) -> None:
    await conversation(store, "old", fork=False)
    clock.advance(MONTH + DAY)
    report = await sweeper(store, keep_daily_usage=False).sweep()
    assert report.rows == 2 and report.usage_rows == 0
    assert await daily_usage(store) == []


async def test_a_lineage_touched_recently_keeps_the_whole_session(
    store: SessionStore, store_url: str, clock: FakeClock
) -> None:
    await conversation(store, "old")
    before = await counts(store_url, "old")
    clock.advance(MONTH + DAY)
    # Only the fork is used again: its ancestors' archive is still read, so nothing goes.
    await store.record_usage(UsageRecord(SessionKey("anon", "old#b"), "gpt-test", 9, 1, 14))
    report = await sweeper(store).sweep()
    assert report.rows == 0
    after = await counts(store_url, "old")
    assert after == before | {"usage": before["usage"] + 1}


async def test_deletes_run_in_bounded_batches(
    store: SessionStore, store_url: str, clock: FakeClock
) -> None:
    for n in range(7):
        await store.record_usage(UsageRecord(SessionKey("anon", f"s{n}"), "gpt-test", 10, 1, 2))
    await conversation(store, "big", fork=False)
    owned = await counts(store_url)
    clock.advance(MONTH + DAY)
    await store.record_usage(UsageRecord(SessionKey("anon", "fresh"), "gpt-test", 10, 1, 2))
    report = await sweeper(store, batch_sessions=3, purge_rows=4).sweep()
    children = ("archived_messages", "events", "usage", "checkpoints")
    assert (report.sessions, report.rows) == (8, owned["sessions"])
    assert report.purged == sum(owned[t] for t in (*children, "sessions"))
    # 3 transactions retire 8 sessions; then 4 rows of one table at a time, the session rows
    # in one, and one that finds nothing left; on SQLite the full-text index is compacted and
    # pages are given back 256 at a time.
    sqlite = store.dialect == "sqlite"
    vacuum = -(-report.pages_returned // 256) + 1 if sqlite else 0
    assert (report.merges > 0) == sqlite
    deletes = 3 + sum(-(-owned[t] // 4) for t in children) + 2
    assert report.writes == deletes + report.merges + vacuum
    assert [s.key for s in await store.list_sessions()] == ["fresh"]


async def test_a_sweep_cut_short_is_finished_by_the_next(
    store: SessionStore, store_url: str, clock: FakeClock
) -> None:
    """Retired rows are out of every lookup at once; what they own goes in later steps."""
    await conversation(store, "old")
    clock.advance(MONTH + DAY)
    db = store._db

    async def retire(conn: Any) -> retention.Batch:
        return await retention.retire_roots(conn, [("anon", "old")], clock.now - MONTH, True)

    assert (await db.write(retire)).rows == 3
    assert await store.get_session(SessionKey("anon", "old")) is None
    assert await store.lineage_archive(SessionKey("anon", "old.2")) == []
    left = await counts(store_url)
    assert left["archived_messages"] and left["archive_search"]  # not purged yet
    report = await sweeper(store).sweep()
    assert report.sessions == 0 and report.purged > 0
    assert await counts(store_url) == dict.fromkeys(left, 0)


async def test_one_process_sweeps_per_interval(store_url: str, clock: FakeClock) -> None:
    """Two stores on one database (two processes, or two replicas) take turns to sweep."""
    first = await SessionStore.open(store_url, clock=clock)
    second = await SessionStore.open(store_url, clock=clock)
    try:
        a = Sweeper(first, RetentionPolicy(MONTH, interval_s=3600), owner="a")
        b = Sweeper(second, RetentionPolicy(MONTH, interval_s=3600), owner="b")
        assert await a.sweep_if_due() is not None
        assert await b.sweep_if_due() is None  # a's turn lasts the interval
        assert await a.sweep_if_due() is None  # and does not sweep again within it
        clock.advance(3601)
        assert await b.sweep_if_due() is not None
        assert await a.sweep_if_due() is None
        assert await first._db.read(turn_holder) == "b"
        assert (await counts(store_url))["leases"] == 0  # the turn is no session's lease
    finally:
        await first.close()
        await second.close()


SWEEP_IN_A_PROCESS = """
import asyncio, sys
from storage import RetentionPolicy, SessionStore, Sweeper

async def main(url, now, owner):
    store = await SessionStore.open(url, clock=lambda: now)
    try:
        report = await Sweeper(store, RetentionPolicy(30 * 86400), owner).sweep_if_due()
        print("swept" if report is not None else "not my turn")
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2]), sys.argv[3]))
"""


def test_processes_take_turns(sqlite_url: str, tmp_path: Path) -> None:
    def sweep(now: float, owner: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", SWEEP_IN_A_PROCESS, sqlite_url, str(now), owner],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd=Path(__file__).parents[3],
        )
        return done.stdout.strip()

    assert sweep(1000.0, "first") == "swept"
    assert sweep(1000.0 + 1800, "second") == "not my turn"
    assert sweep(1000.0 + 3601, "second") == "swept"
    assert sweep(1000.0 + 3602, "first") == "not my turn"


async def test_the_periodic_task_sweeps_and_stops_cleanly(
    store: SessionStore, clock: FakeClock
) -> None:
    await store.record_usage(UsageRecord(SessionKey("anon", "old"), "gpt-test", 10, 1, 2))
    clock.advance(MONTH + DAY)
    s = sweeper(store, interval_s=0.05)
    s.start()
    try:
        for _ in range(200):
            if await store.get_session(SessionKey("anon", "old")) is None:
                break
            await asyncio.sleep(0.01)
        assert await store.get_session(SessionKey("anon", "old")) is None
    finally:
        await s.close()
    sweeps = s.sweeps
    await asyncio.sleep(0.1)
    assert s.sweeps == sweeps  # closed: no more sweeps


async def _bulk(store: SessionStore, n: int) -> None:
    big = "x" * 4000
    for i in range(n):
        sk = SessionKey("anon", f"bulk{i}")
        messages = [{"role": "user", "content": f"{big} {i} {j}"} for j in range(12)]
        digests = chain_digests(messages)
        archived = [(p, messages[p]) for p in range(10)]
        await store.commit_compression(
            commit(sk, digests, 10, archived=archived, replacement=messages[:10])
        )


async def test_sqlite_gives_the_space_back(sqlite_url: str, clock: FakeClock) -> None:
    store = await SessionStore.open(sqlite_url, clock=clock)
    try:
        await _bulk(store, 40)
        await store.record_usage(UsageRecord(SessionKey("anon", "live"), "gpt-test", 1, 1, 2))
        s = sweeper(store)
        await s.sweep()  # nothing idle yet: converts the file to incremental vacuum
        path = Path(sqlite_url.split("///", 1)[1])
        clock.advance(MONTH + DAY)
        await store.record_usage(UsageRecord(SessionKey("anon", "live"), "gpt-test", 1, 1, 2))
        await _wal_into_file(sqlite_url)
        full = path.stat().st_size
        report = await s.sweep()
        await _wal_into_file(sqlite_url)
        assert report.rows == 40 and report.pages_returned > 0
        assert path.stat().st_size < full / 4, (path.stat().st_size, full)
        assert [x.key for x in await store.list_sessions()] == ["live"]
    finally:
        await store.close()


async def test_an_older_sqlite_file_is_switched_to_incremental_vacuum(
    sqlite_url: str, clock: FakeClock
) -> None:
    # A file an earlier version made: in WAL mode, with tables, past the point where
    # auto_vacuum could be set without a VACUUM.
    path = sqlite_url.split("///", 1)[1]
    with contextlib.closing(sqlite3.connect(path)) as older:
        older.execute("PRAGMA journal_mode=WAL")
        older.execute("CREATE TABLE earlier (x INTEGER)")
        older.commit()
    store = await SessionStore.open(sqlite_url, clock=clock)
    try:
        assert await _pragma(sqlite_url, "auto_vacuum") == 0
        await _bulk(store, 5)
        clock.advance(MONTH + DAY)
        report = await sweeper(store).sweep()
        assert report.rows == 5
        assert await _pragma(sqlite_url, "auto_vacuum") == 2
        assert await _pragma(sqlite_url, "freelist_count") == 0
    finally:
        await store.close()


async def test_a_new_sqlite_file_gives_space_back_from_the_start(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    await store.close()
    assert await _pragma(sqlite_url, "auto_vacuum") == 2  # incremental, no VACUUM needed


async def _pragma(url: str, name: str) -> int:
    db = Database.connect(url)
    try:

        async def read(conn: Any) -> int:
            return int((await conn.exec_driver_sql(f"PRAGMA {name}")).scalar())

        return await db.read(read)
    finally:
        await db.dispose()


async def _wal_into_file(url: str) -> None:
    db = Database.connect(url)
    try:
        await db.read(lambda conn: conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)"))
    finally:
        await db.dispose()


def test_daily_totals_split_by_utc_day_scope_and_model() -> None:
    day = 1_700_000_000.0 - (1_700_000_000.0 % DAY)  # a UTC midnight
    rows = [
        (("a", "m1"), day + 10, 100, 10),
        (("a", "m1"), day + DAY - 1, 50, 5),
        (("a", "m1"), day + DAY, 7, 1),
        (("a", "m2"), day + 10, 3, 3),
        (("b", "m1"), day + 10, 1, 1),
    ]
    totals = daily_totals(rows)
    assert [
        (t["day"], t["scope"], t["model"], t["requests"], t["prompt_tokens"]) for t in totals
    ] == [
        ("2023-11-14", "a", "m1", 2, 150),
        ("2023-11-14", "a", "m2", 1, 3),
        ("2023-11-14", "b", "m1", 1, 1),
        ("2023-11-15", "a", "m1", 1, 7),
    ]


# -- through the proxy -----------------------------------------------------------------------

IDLE_S = 4.0  # real seconds: the proxy's own store runs on the wall clock


def _wait_for(condition: Any, timeout_s: float, step: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        if step is not None:
            step()
        else:
            time.sleep(0.05)


async def test_through_the_proxy_a_swept_session_is_gone_and_a_live_one_untouched(
    sim: Simulator, store_url: str, tmp_path: Path
) -> None:
    """Two agents through ctxgate; one stops. The periodic sweep (started with the app) deletes
    every row it left, while the other keeps going: its rows are all there and its requests
    still reach the model through its checkpoint."""
    settings = settings_for(
        sim.base_url,
        str(tmp_path / "unused.db"),
        models=[{"match": "*", "upstream": "sim", "context_length": 8192}],
        compression={"background": False},
        storage={
            "url": store_url,
            "retention": {"session_idle_days": IDLE_S / DAY, "interval_s": 0.2},
        },
    )
    with ProxyServer(settings) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)
        old = AgentLoop(client, "small-8k", session_id="old")
        live = AgentLoop(client, "small-8k", session_id="live")
        old.script(sim)
        for step in range(16):
            old.step(step)
            live.step(step)
        assert "true" in old.compressed_headers and "true" in live.compressed_headers
        proxy.run(proxy.services.store.flush())
        left = await counts(store_url, "old")
        assert all(left[t] for t in TABLES), left

        # "live" keeps working; "old" goes idle and is swept.
        steps = iter(range(16, 200))
        _wait_for(
            lambda: proxy.run(counts(store_url, "old"))["sessions"] == 0,
            timeout_s=60,
            step=lambda: live.step(next(steps)),
        )
        proxy.run(proxy.services.store.flush())
        kept = await counts(store_url, "live")
        sweeps = proxy.services.sweeper.sweeps
        _wait_for(lambda: proxy.services.sweeper.sweeps >= sweeps + 2, timeout_s=IDLE_S / 2)
        assert await counts(store_url) == kept  # nothing of "old" is left anywhere
        assert await counts(store_url, "live") == kept  # and "live" lost nothing

        live.step(next(steps))
        sent = [r for r in sim.chat_requests if not r.is_summary][-1]
        assert live.compressed_headers[-1] == "true"
        assert len(sent.messages) < len(live.messages) - 1  # its checkpoint still serves
        assert live.responses[-1].choices[0].message.tool_calls
