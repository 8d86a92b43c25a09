"""SQLite lookups run on the event loop's thread: same answers as the pool, no waiting on it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, Select, bindparam, column, event, select, table

from storage import SessionKey, SessionStore, UsageRecord
from storage.database import tables
from storage.database.db import Database
from storage.database.inline import Executor
from storage.rows import checkpoints, sessions
from tests.storage.factories import FakeClock, chain_digests, commit, history

SK = SessionKey("scope-a", "session-1")
DIGESTS = chain_digests(history(12))
T = TypeVar("T")


def finished_at_once(coro: Coroutine[Any, Any, T]) -> T:
    """The coroutine's result when it ends without giving the event loop a turn."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("the coroutine waited for something")


@pytest.fixture
async def sqlite_store(sqlite_url: str, clock: FakeClock) -> AsyncIterator[SessionStore]:
    opened = await SessionStore.open(sqlite_url, clock=clock)
    yield opened
    await opened.close()


async def test_a_session_lookup_needs_no_round_trip_through_a_thread(
    sqlite_store: SessionStore,
) -> None:
    await sqlite_store.record_usage(UsageRecord(SK, "gpt-4o", 1200, 30, 12))
    found = finished_at_once(sqlite_store.get_session(SK))
    assert found is not None and (found.last_prompt_tokens, found.request_count) == (1200, 1)
    assert finished_at_once(sqlite_store.get_session(SessionKey("scope-a", "other"))) is None


async def test_a_checkpoint_lookup_needs_no_round_trip_through_a_thread(
    sqlite_store: SessionStore,
) -> None:
    written = await sqlite_store.commit_compression(commit(SK, DIGESTS, 8))
    assert finished_at_once(sqlite_store.find_checkpoint(SK, DIGESTS)) == written


async def test_lookups_answer_what_reads_through_the_pool_answer(
    sqlite_store: SessionStore, sqlite_url: str, clock: FakeClock
) -> None:
    store = sqlite_store
    await store.record_usage(UsageRecord(SK, "gpt-4o", 900, 20, 9))
    await store.save_engine_state(SK, {"previous_summary": "é ✓", "n": [1, 2.5]})
    await store.commit_compression(commit(SK, DIGESTS, 4))
    clock.advance(1)
    await store.commit_compression(commit(SK, DIGESTS, 8, rotate_to="session-2"))
    db = Database.connect(sqlite_url)
    try:
        for sk in (SK, SessionKey(SK.scope, "session-2"), SessionKey(SK.scope, "none")):

            async def one(conn: Executor, sk: SessionKey = sk) -> Any:
                return await sessions.get(conn, sk)

            assert await db.lookup(one) == await db.read(one)
        for digests in (DIGESTS, DIGESTS[:6], DIGESTS[:3], chain_digests(history(12, "x"))):

            async def found(conn: Executor, digests: list[str] = digests) -> Any:
                return await checkpoints.find(conn, SK, digests)

            assert await db.lookup(found) == await db.read(found)
    finally:
        await db.dispose()


T_ROWS: Select[Any] = select(column("x")).select_from(table("t")).order_by(column("x"))
BUILT_ONCE = T_ROWS.where(column("x") >= bindparam("low"))


@pytest.mark.parametrize("built_once", [False, True], ids=["statement", "built-once"])
async def test_a_lookup_sqlite_would_make_wait_goes_through_the_pool_and_the_loop_runs_on(
    sqlite_url: str, built_once: bool
) -> None:
    """A file not in WAL mode: a writer's lock stops readers. The lookup waits off the loop."""
    db = Database.connect(sqlite_url)  # no prepare(): the file keeps its rollback journal
    path = sqlite_url.split("///", 1)[1]
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("INSERT INTO t VALUES (2)")

    async def rows(conn: Executor) -> list[int]:
        found = await (conn.execute(BUILT_ONCE, {"low": 0}) if built_once else conn.execute(T_ROWS))
        return [x for (x,) in found]

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, writer.execute, "COMMIT")
    try:
        started = loop.time()
        assert await db.lookup(rows) == [1, 2]
        assert loop.time() - started >= 0.25
        assert ticks >= 10  # the loop was not held while the lock was
    finally:
        ticking.cancel()
        writer.close()
        await db.dispose()


async def test_a_statement_compiled_once_gives_the_rows_sqlalchemy_gives(
    sqlite_store: SessionStore, sqlite_url: str
) -> None:
    """Prepared on the inline path: same keys, values and Python types (a boolean, floats)."""
    for n in range(3):
        await sqlite_store.record_usage(UsageRecord(SessionKey("s", f"k{n}"), "m", 10 * n, n, n))
    by_scope = select(tables.sessions).where(tables.sessions.c.scope == bindparam("scope"))
    by_scope = by_scope.order_by(tables.sessions.c.key)
    db = Database.connect(sqlite_url)
    try:

        async def rows(conn: Executor) -> list[dict[str, Any]]:
            found = await conn.execute(by_scope, {"scope": "s"})
            return [dict(row) for row in found.mappings()]

        for _ in range(2):  # compiled on the first call, reused on the second
            inline, pooled = await db.lookup(rows), await db.read(rows)
            assert len(inline) == 3 and inline == pooled
            assert [[type(v) for v in r.values()] for r in inline] == [
                [type(v) for v in r.values()] for r in pooled
            ]
            assert all(r["last_usage_estimated"] is False for r in inline)
    finally:
        await db.dispose()


async def test_lookups_hold_no_read_transaction_that_would_keep_the_wal_growing(
    sqlite_store: SessionStore, sqlite_url: str
) -> None:
    """A reader left inside a read transaction stops checkpoints from emptying the WAL."""
    store = sqlite_store
    await store.commit_compression(commit(SK, DIGESTS, 8))
    for _ in range(20):
        await store.record_usage(UsageRecord(SK, "gpt-4o", 100, 5, 12))
        assert await store.get_session(SK) is not None
        assert await store.find_checkpoint(SK, DIGESTS) is not None
    other = sqlite3.connect(sqlite_url.split("///", 1)[1])
    try:
        busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        other.close()
    assert busy == 0


async def test_a_sessions_compression_switch_is_read_without_sqlalchemys_execution(
    sqlite_store: SessionStore,
) -> None:
    """Every request of a session not seen lately reads its switch: the statement is built
    once and runs on sqlite3 directly, not through SQLAlchemy's per-statement work."""
    other = SessionKey("scope-a", "session-2")
    await sqlite_store.set_compression(SK, True)
    executed: list[str] = []

    def note(*args: Any) -> None:
        executed.append(str(args[2]))

    event.listen(Engine, "before_cursor_execute", note)
    try:
        for _ in range(2):
            assert finished_at_once(sqlite_store.compression_off([SK])) == {SK}
            assert finished_at_once(sqlite_store.compression_off([other])) == set()
    finally:
        event.remove(Engine, "before_cursor_execute", note)
    assert executed == []
    # Several sessions at once still read through SQLAlchemy, with the same answer.
    assert await sqlite_store.compression_off([SK, other]) == {SK}


async def test_an_archive_search_needs_no_round_trip_through_a_thread(
    sqlite_store: SessionStore,
) -> None:
    """Recall before asking searches on every turn of a compressed session: on SQLite the
    lineage's spans and the full-text queries run on the calling thread."""
    archived = [
        (1, {"role": "tool", "tool_call_id": "c1", "content": "Ticket ID-7 is blocked."}),
        (2, {"role": "user", "content": "The lagoon code is LG-31, by the north gate."}),
    ]
    await sqlite_store.commit_compression(commit(SK, DIGESTS, 8, archived=archived))
    queries = [("ID-7", 2), ("LG-31", 2), ("where is the north gate?", 5)]
    found = finished_at_once(sqlite_store.search_archive_each(SK, queries))
    assert [[hit.position for hit in hits] for hits in found] == [[1], [2], [2]]
    assert found == [await sqlite_store.search_archive(SK, q, n) for q, n in queries]
