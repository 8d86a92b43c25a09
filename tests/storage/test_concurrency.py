import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from storage import DatabaseBusy, SessionKey, SessionStore, UsageRecord
from storage.errors import translate_errors
from tests.storage.factories import chain_digests, commit, history

DIGESTS = chain_digests(history(20))


async def _busy_work(store: SessionStore, name: str, rounds: int) -> None:
    for i in range(rounds):
        sk = SessionKey("scope", f"{name}-{i % 3}")
        store.record_usage_later(UsageRecord(sk, "m", 100 + i, 5, 10))
        await store.commit_compression(commit(sk, DIGESTS, 1 + i % 20))
        await store.record_usage(UsageRecord(sk, "m", 50, 5, 10))
        await store.acquire_lease(sk, name, 30)
        await store.release_lease(sk, name)
        await store.find_checkpoint(sk, DIGESTS)
    await store.flush()


async def test_concurrent_writers_on_two_engines_all_succeed(store_url: str) -> None:
    stores = [await SessionStore.open(store_url) for _ in range(2)]
    try:
        # Two "processes", each with several tasks, all writing at once.
        await asyncio.gather(
            *(_busy_work(s, f"w{n}-{t}", 15) for n, s in enumerate(stores) for t in range(3))
        )
        sessions = await stores[0].list_sessions(limit=100)
        assert len(sessions) == 2 * 3 * 3
        assert sum(s.request_count for s in sessions) == 2 * 3 * 15 * 2
        assert sum(s.compression_count for s in sessions) == 2 * 3 * 15
        assert all(s.stats.usage_failed == s.stats.usage_dropped == 0 for s in stores)
    finally:
        for s in stores:
            await s.close()


async def test_writer_waits_for_another_process_holding_the_lock(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    path = sqlite_url.split("///", 1)[1]
    locked, release = threading.Event(), threading.Event()

    def other_process() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO model_windows VALUES ('held', 1, 0)")
        locked.set()
        release.wait()
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=other_process)
    thread.start()
    try:
        await asyncio.to_thread(locked.wait)
        sk = SessionKey("scope", "s")
        writes = asyncio.gather(
            store.commit_compression(commit(sk, DIGESTS, 5)),
            store.record_usage(UsageRecord(sk, "m", 1, 1, 1)),
            store.set_model_window("m", 1000),
        )
        await asyncio.sleep(0.2)  # the writes are now waiting in SQLite's busy handler
        assert await store.get_model_windows() == {}  # WAL: readers do not wait for writers
        release.set()
        await writes
        assert await store.get_model_windows() == {"held": 1, "m": 1000}
    finally:
        release.set()
        thread.join()
        await store.close()


def test_a_locked_database_is_reported_as_database_busy(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with pytest.raises(DatabaseBusy), translate_errors(), engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
    finally:
        engine.dispose()
        holder.close()


async def test_a_cancelled_write_leaves_the_database_usable(store: SessionStore) -> None:
    sk = SessionKey("scope", "s")
    long_history = history(2000)
    digests = chain_digests(long_history)
    for delay in (0, 0.001, 0.003, 0.01, 0.03):
        big = commit(sk, digests, 2000, archived=list(enumerate(long_history)))
        task = asyncio.create_task(store.commit_compression(big))
        await asyncio.sleep(delay)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # The next writes go through at once; nothing is half-written.
        await store.record_usage(UsageRecord(sk, "m", 1, 1, 1))
        detail = await store.session_detail(sk)
        assert detail is not None
        assert len(detail.checkpoints) == len(detail.events) == detail.session.compression_count
        assert detail.archived_count == (2000 if detail.checkpoints else 0)
