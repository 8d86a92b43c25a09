import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Connection, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import SessionKey, SessionStore, StorageError
from storage.database.db import Database
from storage.database.migrations import MIGRATIONS, Migration, ensure_schema
from storage.database.tables import schema_version


async def _versions(url: str) -> list[int]:
    db = Database.connect(url)
    try:
        result = await db.read(lambda conn: conn.execute(select(schema_version.c.version)))
        return list(result.scalars())
    finally:
        await db.dispose()


async def test_open_creates_directories_and_schema(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/a/b/ctxgate.db"
    store = await SessionStore.open(url)
    await store.ping()
    await store.close()
    assert (tmp_path / "a" / "b" / "ctxgate.db").exists()
    assert await _versions(url) == [m.version for m in MIGRATIONS]


async def test_reopen_keeps_data_and_applies_nothing_twice(store_url: str) -> None:
    sk = SessionKey("scope", "s1")
    first = await SessionStore.open(store_url)
    await first.save_engine_state(sk, {"kept": True})
    await first.close()
    second = await SessionStore.open(store_url)
    record = await second.get_session(sk)
    await second.close()
    assert record is not None and record.engine_state == {"kept": True}
    assert await _versions(store_url) == [m.version for m in MIGRATIONS]


async def test_concurrent_opens_of_a_fresh_database(store_url: str) -> None:
    stores = await asyncio.gather(*(SessionStore.open(store_url) for _ in range(4)))
    for store in stores:
        await store.close()
    assert await _versions(store_url) == [m.version for m in MIGRATIONS]


def _add_notes_table(conn: Connection) -> None:
    conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY)"))


async def test_pending_migration_runs_once_on_an_existing_database(store_url: str) -> None:
    await (await SessionStore.open(store_url)).close()
    steps = [*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "add_notes", _add_notes_table)]
    db = Database.connect(store_url)
    try:
        assert await db.write(lambda c: ensure_schema(c, 1.0, steps)) == [len(MIGRATIONS) + 1]
        assert await db.write(lambda c: ensure_schema(c, 2.0, steps)) == []
        await db.read(lambda conn: conn.execute(text("SELECT count(*) FROM notes")))
    finally:
        await db.dispose()


def _broken(conn: Connection) -> None:
    conn.execute(text("CREATE TABLE half_done (id INTEGER)"))
    raise RuntimeError("step failed")


async def test_failed_migration_leaves_nothing_behind(sqlite_url: str) -> None:
    await (await SessionStore.open(sqlite_url)).close()
    db = Database.connect(sqlite_url)
    try:
        steps = [*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "broken", _broken)]
        with pytest.raises(RuntimeError):
            await db.write(lambda conn: ensure_schema(conn, 1.0, steps))
        result = await db.read(lambda conn: conn.execute(text("SELECT name FROM sqlite_master")))
        assert "half_done" not in set(result.scalars())
    finally:
        await db.dispose()
    assert await _versions(sqlite_url) == [m.version for m in MIGRATIONS]


async def test_checkpoints_of_a_database_older_than_sources_gain_the_column(
    sqlite_url: str,
) -> None:
    """A database made before checkpoints recorded their sources: its rows read as unknown."""
    await (await SessionStore.open(sqlite_url)).close()
    db = Database.connect(sqlite_url)
    try:

        async def make_it_old(conn: AsyncConnection) -> None:
            await conn.execute(text("ALTER TABLE checkpoints DROP COLUMN sources"))
            await conn.execute(text("DELETE FROM schema_version WHERE name = 'checkpoint_sources'"))

        await db.write(make_it_old)
    finally:
        await db.dispose()
    store = await SessionStore.open(sqlite_url)
    try:
        found = await store.archive_facts(SessionKey("s", "missing"))
    finally:
        await store.close()
    assert found is None
    assert await _versions(sqlite_url) == [m.version for m in MIGRATIONS]
    with sqlite3.connect(sqlite_url.removeprefix("sqlite+aiosqlite:///")) as plain:
        columns = [row[1] for row in plain.execute("PRAGMA table_info(checkpoints)")]
    assert "sources" in columns


async def test_sqlite_connection_settings(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    await store.close()
    db = Database.connect(sqlite_url)
    try:

        async def read_pragmas(conn: AsyncConnection) -> dict[str, object]:
            return {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "busy_timeout", "synchronous", "foreign_keys")
            }

        pragmas = await db.read(read_pragmas)
    finally:
        await db.dispose()
    # synchronous: 1 = NORMAL
    assert pragmas == {
        "journal_mode": "wal",
        "busy_timeout": 5000,
        "synchronous": 1,
        "foreign_keys": 1,
    }


async def test_write_transactions_begin_immediate(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    await store.close()
    db = Database.connect(sqlite_url)
    other = sqlite3.connect(sqlite_url.split("///", 1)[1], timeout=0)
    try:

        async def select_then_probe(conn: AsyncConnection) -> None:
            await conn.execute(text("SELECT 1"))
            # The write lock is already ours after a mere SELECT: IMMEDIATE, not DEFERRED.
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")

        await db.write(select_then_probe)
    finally:
        other.close()
        await db.dispose()


@pytest.mark.parametrize(
    "url",
    [
        "nosuchdb://x",
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "postgresql+asyncpg://postgres@127.0.0.1:1/nothing_listens_here",
    ],
)
async def test_unusable_urls_raise_storage_error(url: str) -> None:
    with pytest.raises(StorageError):
        await SessionStore.open(url)


async def test_unwritable_sqlite_path_raises_storage_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file, not a directory")
    with pytest.raises(StorageError):
        await SessionStore.open(f"sqlite+aiosqlite:///{tmp_path}/taken/ctxgate.db")
