"""Small SQLite reads run on the calling thread instead of through aiosqlite's worker thread.

Through aiosqlite every statement is several hops to its thread and back (checkout, cursor,
execute, fetch, close, the pool's reset). A session lookup measured 1.3 ms of CPU that way,
3.4 ms with 16 at once (the pool opens and closes overflow connections), around a query
SQLite answers in tens of microseconds. In WAL mode a reader never waits for a writer, so the
query costs the event loop no more than itself. Where it would wait (a WAL being recovered,
a file SQLite could not switch to WAL, another process's exclusive lock) the busy timeout of
0 makes it fail at once, and the caller takes the usual path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Result, create_engine, event
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.base import Executable


class Reader(Protocol):
    """What read functions need of a connection: an AsyncConnection, or an InlineConnection."""

    @property
    def dialect(self) -> Dialect: ...

    async def execute(
        self, statement: Executable, parameters: Mapping[str, Any] | None = None
    ) -> Result[Any]: ...


class InlineConnection:
    """An AsyncConnection's `execute` for reads, run to its end before it returns.

    Each statement runs in its own implicit transaction (autocommit), fetched whole, so no
    read transaction stays open to hold back the WAL's checkpoints.
    """

    def __init__(self, conn: Connection) -> None:
        self.sync = conn

    @property
    def dialect(self) -> Dialect:
        return self.sync.dialect

    async def execute(
        self, statement: Executable, parameters: Mapping[str, Any] | None = None
    ) -> Result[Any]:
        return self.sync.execute(statement, parameters).freeze()()


class InlineReader:
    """One query-only sqlite3 connection to the database file, opened on first use."""

    def __init__(self, url: URL) -> None:
        self._engine: Engine = create_engine(
            url.set(drivername="sqlite"),
            poolclass=StaticPool,
            isolation_level="AUTOCOMMIT",
            # timeout is sqlite3's busy timeout: fail at once rather than block the loop.
            connect_args={"timeout": 0, "check_same_thread": False},
        )
        event.listen(self._engine, "connect", _query_only)
        self._conn: InlineConnection | None = None

    def connection(self) -> InlineConnection:
        """The connection (opened now if not yet). Raises SQLAlchemy's errors."""
        if self._conn is None:
            self._conn = InlineConnection(self._engine.connect())
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.sync.close()
            self._conn = None
        self._engine.dispose()


def _query_only(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()
