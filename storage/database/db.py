"""The async engine: SQLite connection settings, read and write transactions, upserts.

SQLite (one host, one writer at a time): WAL so readers never wait for the writer,
busy_timeout so a second process waits instead of failing, and BEGIN IMMEDIATE for write
transactions so the write lock is taken up front -- a deferred transaction that reads and then
writes can get SQLITE_BUSY without the busy handler ever being consulted. PostgreSQL needs
none of this; the same statements run on both.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Table, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from storage.database.inline import CONNECTION_PRAGMAS, Executor, InlineSQLite
from storage.errors import DatabaseBusy, StorageError, translate_errors

logger = logging.getLogger("ctxgate.storage")

SQLITE_BUSY_TIMEOUT_MS = 5000
# The inline connection never checkpoints (it would fsync on the loop): after this many of
# its writes one of the pool's connections checkpoints the WAL.
CHECKPOINT_EVERY = 16
_BEGIN_OPTION = "ctxgate_begin"
_NO_BEGIN = "none"

Upsert = sqlite.Insert | postgresql.Insert
T = TypeVar("T")
Work = Callable[[AsyncConnection], Awaitable[T]]
Inline = Callable[[Executor], Awaitable[T]]


class Database:
    """An AsyncEngine plus the two kinds of transaction storage uses."""

    def __init__(self, engine: AsyncEngine, inline: InlineSQLite | None = None) -> None:
        self.engine = engine
        self._inline = inline
        self._seen_version: int | None = None
        self._inline_writes = 0
        self.dialect = engine.dialect.name
        is_sqlite = self.dialect == "sqlite"
        self._reader = (
            engine.execution_options(**{_BEGIN_OPTION: _NO_BEGIN}) if is_sqlite else engine
        )
        self._writer = (
            engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}) if is_sqlite else engine
        )
        # SQLite takes one writer per file anyway. Queueing this process's writers on an
        # asyncio.Lock (FIFO) keeps them from sleeping inside SQLite's busy handler, which
        # then only arbitrates between processes.
        self._write_gate: AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if is_sqlite else nullcontext()
        )

    @classmethod
    def connect(cls, url: str) -> Database:
        """Build the engine for `url` (no I/O yet). Raises StorageError for a bad URL."""
        with translate_errors():
            parsed = make_url(url)
            if parsed.get_backend_name() == "sqlite":
                _prepare_sqlite_path(parsed)
            # Statement parameters are conversation content: out of logs and error texts.
            engine = create_async_engine(parsed, hide_parameters=True)
            if engine.dialect.name != "sqlite":
                return cls(engine)
            _install_sqlite_hooks(engine)
            return cls(engine, InlineSQLite(parsed))

    async def read(self, work: Work[T], *, snapshot: bool = False) -> T:
        """Run `work(conn)` on a connection for reads and return its result.

        With snapshot=True all its statements see one snapshot. Without, each SQLite
        statement runs in its own implicit transaction: an explicit BEGIN costs as much as
        the SELECT itself through aiosqlite's thread.
        """
        engine = self.engine if snapshot else self._reader
        return await _run_to_completion(self._run(engine.connect(), work))

    @property
    def versioned(self) -> bool:
        """Whether `changed_elsewhere` can tell (SQLite); else copies of rows need an age."""
        return self._inline is not None

    @property
    def looked(self) -> bool:
        """Whether `changed_elsewhere` has a data version to compare with (its first call, or
        the first after an error, answers True)."""
        return self._seen_version is not None

    def changed_elsewhere(self) -> bool:
        """Whether a connection other than the inline one committed since the last call
        (True when it cannot tell). Writes through `write_inline` are not counted."""
        if self._inline is None:
            return True
        try:
            version = self._inline.data_version()
        except (SQLAlchemyError, sqlite3.Error):
            self._seen_version = None
            return True
        changed = version != self._seen_version
        self._seen_version = version
        return changed

    async def lookup(self, work: Inline[T]) -> T:
        """`read` for a few indexed rows: on SQLite run on this thread (see
        storage.database.inline), falling back to `read` when SQLite would make it wait or fails
        it."""
        if self._inline is not None:
            # Errors come from SQLAlchemy, or from sqlite3 for statements built once.
            try:
                return await work(self._inline.connection())
            except (SQLAlchemyError, sqlite3.Error) as exc:
                logger.debug("inline read failed, reading through the pool: %s", exc)
        return await self.read(work)

    async def write_inline(self, work: Inline[T]) -> T:
        """`write` for a short transaction: on SQLite run on this thread when the write lock
        is free at once, else (or when it fails) through `write`."""
        if self._inline is not None:
            try:
                result = await self._inline.write(work)
            except (SQLAlchemyError, sqlite3.Error) as exc:
                logger.debug("inline write failed, writing through the pool: %s", exc)
            else:
                self._inline_writes += 1
                if self._inline_writes % CHECKPOINT_EVERY == 0:
                    await self.checkpoint()
                return result
        return await self.write(work)

    async def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file, without waiting on anyone. Never
        raises: what was written stays written, and the next checkpoint catches up."""

        async def passive(conn: AsyncConnection) -> None:
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

        if self.dialect != "sqlite":
            return
        try:
            await self.read(passive)
        except StorageError as exc:
            logger.warning("WAL checkpoint failed: %s", exc)

    async def write(self, work: Work[T]) -> T:
        """Run `work(conn)` in one write transaction: committed if it returns, else rolled back.

        Once started, the transaction runs to its end even if the caller is cancelled (the
        cancellation is re-raised afterwards): abandoned half-way, a SQLite connection can
        keep the file's write lock and every later writer fails with "database is locked".
        """
        async with self._write_gate:
            return await _run_to_completion(self._run(self._writer.begin(), work))

    @staticmethod
    async def _run(connection: AbstractAsyncContextManager[AsyncConnection], work: Work[T]) -> T:
        with translate_errors():
            async with connection as conn:
                return await work(conn)

    async def prepare(self) -> None:
        """Switch a SQLite file to WAL (persistent, so once per file); no-op on PostgreSQL.

        Not done per connection: while one connection converts a fresh file, another one's
        attempt fails at once with "database is locked" (the busy handler is not consulted),
        so several processes opening a new file together retry here instead.
        """
        if self.dialect != "sqlite":
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                mode = await self._set_wal()
            except DatabaseBusy:
                mode = "busy"
            if mode == "wal" or loop.time() >= deadline:
                break
            await asyncio.sleep(0.01)
        if mode != "wal":
            # SQLite reports failure by returning the previous mode, not by raising.
            logger.warning("SQLite refused WAL (journal_mode=%s); writers will block readers", mode)

    async def _set_wal(self) -> str:
        async def set_wal(conn: AsyncConnection) -> str:
            # Before the first table: a fresh file then gives space back without the VACUUM
            # an existing one needs (storage.rows.retention); on an existing file this is a no-op.
            await conn.exec_driver_sql("PRAGMA auto_vacuum=INCREMENTAL")
            return str((await conn.exec_driver_sql("PRAGMA journal_mode=WAL")).scalar())

        # journal_mode cannot change inside a transaction: the reader emits no BEGIN.
        return (await self.read(set_wal)).lower()

    async def dispose(self) -> None:
        with translate_errors():
            if self._inline is not None:
                self._inline.close()
            await self.engine.dispose()


async def _run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` in a task of its own; a cancellation meanwhile is re-raised at its end."""
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.done():
                raise
            cancelled = exc
        else:
            break
    if cancelled is not None:
        raise cancelled
    return result


def upsert(conn: AsyncConnection, table: Table) -> Upsert:
    """INSERT with ON CONFLICT support for the connection's dialect (SQLite >= 3.24, PG)."""
    return insert_for(conn.dialect.name, table)


def insert_for(dialect: str, table: Table) -> Upsert:
    """`upsert` by dialect name, for statements built once and reused."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def _prepare_sqlite_path(url: URL) -> None:
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        # A :memory: database lives in one connection; readers and writers here use several.
        raise StorageError("SQLite storage needs a file path, e.g. sqlite+aiosqlite:///ctxgate.db")
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 driver (it would skip it for SELECTs and
        # cannot say IMMEDIATE); _on_begin emits our own.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        for pragma in CONNECTION_PRAGMAS:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        kind = conn.get_execution_options().get(_BEGIN_OPTION, "")
        if kind != _NO_BEGIN:
            conn.exec_driver_sql(f"BEGIN {kind}".rstrip())
