"""Usage batches written on the event loop's thread, and session copies kept while no other
connection commits: SQLite's data version tells this process's own writes from the rest."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sqlalchemy import Engine, column, event, select, table
from sqlalchemy import insert as insert_into

from storage import SessionKey, SessionStore, UsageRecord
from storage.database.db import CHECKPOINT_EVERY, Database
from storage.database.inline import Executor
from storage.database.tables import sessions, usage
from storage.journal import Mark
from storage.rows import charges as savings
from storage.rows import marks
from storage.rows import usage as usage_rows
from storage.store import INLINE_USAGE_RECORDS

SK = SessionKey("scope-a", "session-1")
T = table("t", column("x"))
T_INSERT = insert_into(T)
T_ROWS = select(T.c.x).order_by(T.c.x)


def path_of(url: str) -> str:
    return url.split("///", 1)[1]


def commit_elsewhere(url: str, sql: str, params: tuple[object, ...] = ()) -> None:
    """Commit `sql` through a connection of its own, as another process would."""
    other = sqlite3.connect(path_of(url))
    try:
        other.execute(sql, params)
        other.commit()
    finally:
        other.close()


@pytest.fixture
async def db(sqlite_url: str) -> AsyncIterator[Database]:
    opened = Database.connect(sqlite_url)
    await opened.prepare()
    await opened.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x INTEGER)"))
    yield opened
    await opened.dispose()


def insert(x: int) -> Callable[[Executor], Awaitable[None]]:
    async def work(conn: Executor) -> None:
        await conn.execute(T_INSERT, [{"x": x}])

    return work


async def rows(db: Database) -> list[int]:
    async def read(conn: Executor) -> list[int]:
        return [r[0] for r in (await conn.execute(T_ROWS)).all()]

    return await db.read(read)


async def test_only_other_connections_commits_count_as_changes(
    db: Database, sqlite_url: str
) -> None:
    db.changed_elsewhere()  # the first call has nothing to compare with
    assert not db.changed_elsewhere()
    for x in range(CHECKPOINT_EVERY + 1):  # a checkpoint by the pool on the way
        await db.write_inline(insert(x))
        assert not db.changed_elsewhere()
    assert await rows(db) == list(range(CHECKPOINT_EVERY + 1))
    await db.write(insert(100))  # one of this process's pool connections
    assert db.changed_elsewhere()
    assert not db.changed_elsewhere()
    commit_elsewhere(sqlite_url, "INSERT INTO t VALUES (200)")
    assert db.changed_elsewhere()


async def test_an_old_copy_is_read_again_only_once_another_connection_committed(
    sqlite_url: str,
) -> None:
    store = await SessionStore.open(sqlite_url, session_cache_s=0.05)
    try:
        store.record_usage_later(UsageRecord(SK, "gpt-4o", 1200, 30, 12))
        await store.flush()
        first = await store.get_session(SK)
        assert first is not None and store.stats.session_reads == 1
        await asyncio.sleep(0.1)  # past the copy's age
        store.record_usage_later(UsageRecord(SK, "gpt-4o", 1300, 30, 14))
        await store.flush()
        mine = await store.get_session(SK)  # only this process wrote: the copy is current
        assert mine is not None and (mine.last_prompt_tokens, mine.request_count) == (1300, 2)
        assert store.stats.session_reads == 1
        commit_elsewhere(
            sqlite_url, "UPDATE sessions SET last_prompt_tokens = 5 WHERE key = ?", (SK.key,)
        )
        await asyncio.sleep(0.1)
        seen = await store.get_session(SK)
        assert seen is not None and (seen.last_prompt_tokens, seen.request_count) == (5, 2)
        assert store.stats.session_reads == 2
    finally:
        await store.close()


async def test_one_look_at_the_data_version_vouches_for_every_old_copy(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url, session_cache_s=0.05)
    keys = [SessionKey("scope-a", f"session-{i}") for i in range(16)]
    try:
        for sk in keys:
            store.record_usage_later(UsageRecord(sk, "gpt-4o", 1200, 30, 12))
        await store.flush()
        for sk in keys:
            await store.get_session(sk)
        assert store.stats.session_reads == 16
        await asyncio.sleep(0.1)  # every copy past its age, nobody else wrote
        before = store.stats.version_checks
        found = [await store.get_session(sk) for sk in keys]  # a burst after a pause
        assert all(f is not None and f.last_prompt_tokens == 1200 for f in found)
        assert (store.stats.session_reads, store.stats.version_checks - before) == (16, 1)
        commit_elsewhere(sqlite_url, "UPDATE sessions SET last_prompt_tokens = 5")
        await asyncio.sleep(0.1)  # the foreign write is seen once the copies are old again
        seen = [await store.get_session(sk) for sk in keys]
        assert all(s is not None and s.last_prompt_tokens == 5 for s in seen)
        assert store.stats.session_reads == 32
    finally:
        await store.close()


async def test_a_session_new_to_the_process_is_read_without_a_look_at_the_data_version(
    sqlite_url: str,
) -> None:
    """Nothing is kept for it that a look could renew: the first read takes the version later
    looks compare with, each new session is then one read and no look, and an old copy is
    still renewed by one look (a foreign write still seen)."""
    store = await SessionStore.open(sqlite_url, session_cache_s=0.05)
    elsewhere = await SessionStore.open(sqlite_url, session_cache_s=0.05)
    other = SessionKey("scope-a", "written-elsewhere")
    try:
        elsewhere.record_usage_later(UsageRecord(other, "gpt-4o", 900, 30, 12))
        await elsewhere.flush()
        assert await store.get_session(SK) is None  # nothing stored yet
        assert (store.stats.session_reads, store.stats.version_checks) == (1, 1)
        found = await store.get_session(other)
        assert found is not None and found.last_prompt_tokens == 900
        assert (store.stats.session_reads, store.stats.version_checks) == (2, 1)
        await asyncio.sleep(0.1)  # both copies past their age, nobody wrote since
        assert await store.get_session(other) is not None
        assert (store.stats.session_reads, store.stats.version_checks) == (2, 2)
        elsewhere.record_usage_later(UsageRecord(other, "gpt-4o", 950, 30, 14))
        await elsewhere.flush()
        await asyncio.sleep(0.1)
        seen = await store.get_session(other)
        assert seen is not None and seen.last_prompt_tokens == 950
        assert (store.stats.session_reads, store.stats.version_checks) == (3, 3)
    finally:
        await elsewhere.close()
        await store.close()


async def test_a_large_usage_batch_goes_through_the_pool(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url, session_cache_s=0.05)
    try:
        store.record_usage_later(UsageRecord(SK, "gpt-4o", 100, 1, 2))
        await store.flush()
        assert await store.get_session(SK) is not None and store.stats.session_reads == 1
        for n in range(INLINE_USAGE_RECORDS + 1):  # one batch: flush waits for all
            store.record_usage_later(UsageRecord(SessionKey("scope-a", f"s{n}"), "m", 1, 1, 1))
        await store.flush()
        await asyncio.sleep(0.1)
        # Committed by a pool connection: the copies are read again, none is trusted.
        found = await store.get_session(SK)
        assert found is not None and found.request_count == 1
        assert store.stats.session_reads == 2
    finally:
        await store.close()


async def test_usage_waits_for_a_held_write_lock_off_the_loop(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    holder = sqlite3.connect(path_of(sqlite_url), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        store.record_usage_later(UsageRecord(SK, "gpt-4o", 700, 10, 5))
        flushed = asyncio.ensure_future(store.flush())
        ticks = 0
        for _ in range(30):
            await asyncio.sleep(0.01)
            ticks += 1
        assert not flushed.done()  # the batch waits for the lock, in the pool's thread
        holder.execute("ROLLBACK")
        await asyncio.wait_for(flushed, 10)
        assert ticks == 30
        count = holder.execute(
            "SELECT request_count FROM sessions WHERE key = ?", (SK.key,)
        ).fetchone()
        assert count == (1,)
    finally:
        holder.close()
        await store.close()


async def test_the_wal_is_checkpointed_though_inline_commits_never_do_it(
    db: Database, sqlite_url: str
) -> None:
    def wal_bytes() -> int:
        # A checkpointed WAL starts again from its beginning: the file stops growing.
        return os.path.getsize(path_of(sqlite_url) + "-wal")

    start = wal_bytes()
    for x in range(CHECKPOINT_EVERY - 1):
        await db.write_inline(insert(x))
    per_write = (wal_bytes() - start) / (CHECKPOINT_EVERY - 1)
    for x in range(5 * CHECKPOINT_EVERY):
        await db.write_inline(insert(x))
    assert wal_bytes() - start < 2 * CHECKPOINT_EVERY * per_write


async def test_an_insert_run_inline_writes_what_sqlalchemy_writes(sqlite_url: str) -> None:
    """The write-behind's inserts, compiled once and run on sqlite3 by the inline connection,
    leave the rows the pool's SQLAlchemy execution leaves (booleans, nulls, upserts, the
    session found by key), batch after batch."""
    seen: list[str] = []

    def on_execute(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        seen.append(sql)

    inline_store = await SessionStore.open(sqlite_url)
    db = inline_store.database
    sk_pool = SessionKey("scope-a", "by-pool")
    try:
        await inline_store.save_engine_state(SK, {})
        await inline_store.save_engine_state(sk_pool, {})

        def rows_for(sk: SessionKey, n: int) -> list[savings.ChargeRow]:
            return [
                savings.ChargeRow(sk, 100.0 + i, "gpt-test", "request", i % 2 == 0, i, 2, 0, 4)
                for i in range(n)
            ]

        def records(sk: SessionKey, n: int) -> list[UsageRecord]:
            return [
                UsageRecord(sk, "gpt-test", 500 + i, 7, 3 + i, at=200.0 + i, estimated=i == 1)
                for i in range(n)
            ]

        event.listen(Engine, "before_cursor_execute", on_execute)
        for n in (3, 1, 4):  # the same statements again, with other batch sizes
            for sk, write in ((SK, db.write_inline), (sk_pool, db.write)):

                async def work(conn: Executor, sk: SessionKey = sk, n: int = n) -> None:
                    await savings.add_charges(conn, rows_for(sk, n))
                    await usage_rows.apply(conn, records(sk, n), 300.0)
                    await marks.advance(conn, Mark(f"j-{sk.key}", n), 300.0)

                await write(work)
        event.remove(Engine, "before_cursor_execute", on_execute)
        # Only the pool's batches went through SQLAlchemy's execution.
        assert sum(sql.startswith("INSERT INTO charges") for sql in seen) == 3

        def same(row: savings.ChargeRow) -> tuple[object, ...]:
            return (row.at, row.compressed, row.uncached, row.full_prompt, row.model, row.kind)

        inline = [same(r) for r in await inline_store.charges_of(SK)]
        pooled = [same(r) for r in await inline_store.charges_of(sk_pool)]
        assert inline == pooled and len(inline) == 8
        assert {r[1] for r in inline} == {True, False}
        points = await db.read(lambda conn: usage_points(conn))
        assert points[SK.key] == points[sk_pool.key] and len(points[SK.key]) == 8
        inline_store.forget_cached()
        a, b = await inline_store.get_session(SK), await inline_store.get_session(sk_pool)
        assert a is not None and b is not None
        assert (a.request_count, a.total_prompt_tokens, a.last_prompt_tokens) == (
            b.request_count,
            b.total_prompt_tokens,
            b.last_prompt_tokens,
        )
        assert await db.read(lambda conn: marks.written(conn, f"j-{SK.key}")) == 4
    finally:
        await inline_store.close()


async def usage_points(conn: Executor) -> dict[str, list[tuple[object, ...]]]:
    stmt = (
        select(sessions.c.key, usage.c.at, usage.c.prompt_tokens, usage.c.estimated)
        .join(sessions, sessions.c.id == usage.c.session_id)
        .order_by(usage.c.id)
    )
    found: dict[str, list[tuple[object, ...]]] = {}
    for row in (await conn.execute(stmt)).all():
        found.setdefault(row[0], []).append(tuple(row[1:]))
    return found
