"""Small SQLite statements run on the calling thread instead of through aiosqlite's thread.

Through aiosqlite every statement is several hops to its thread and back (checkout, cursor,
execute, fetch, close, the pool's reset). A session lookup measured 1.3 ms of CPU that way,
3.4 ms with 16 at once (the pool opens and closes overflow connections), around a query
SQLite answers in tens of microseconds. In WAL mode a reader never waits for a writer, so the
query costs the event loop no more than itself. Where it would wait (a WAL being recovered,
a file SQLite could not switch to WAL, another process's exclusive lock) the busy timeout of
0 makes it fail at once, and the caller takes the usual path.

The usage write-behind's batches go through the same connection (two statements, no fsync
at commit in WAL mode with synchronous=NORMAL; the WAL is checkpointed by the pool's
connections, never on the loop). Commits of this one connection leave its `data_version`
alone, so a change in it means that another connection -- another process, or one of this
process's pool connections -- committed: which is how the session cache knows its rows are
still current without reading them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine, Insert, Result, Select, create_engine, event
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.base import Executable

_MAX_PREPARED = 64
# Set on every connection to the file, the pool's and the inline one. synchronous is per
# connection: without NORMAL a WAL commit waits for an fsync (on the loop, for this one).
CONNECTION_PRAGMAS = ("synchronous=NORMAL", "foreign_keys=ON")
T = TypeVar("T")


Parameters = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class Executor(Protocol):
    """What storage functions need of a connection: an AsyncConnection, or an
    InlineConnection."""

    @property
    def dialect(self) -> Dialect: ...

    async def execute(
        self, statement: Executable, parameters: Parameters | None = None
    ) -> Result[Any]: ...


Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A SELECT compiled for sqlite3, with the conversions SQLAlchemy would apply."""

    statement: Select[Any]  # held so that its id stays its own while this is cached
    sql: str
    names: tuple[str, ...]  # parameter names, in placeholder order
    binds: tuple[Processor | None, ...]
    defaults: dict[str, Any]  # values the statement holds itself (a LIMIT's)
    columns: SimpleResultMetaData
    results: tuple[Processor | None, ...]

    @classmethod
    def of(cls, statement: Select[Any], dialect: Dialect) -> _Prepared | None:
        compiled = statement.compile(dialect=dialect)
        names = tuple(compiled.positiontup or ())
        params = [compiled.binds[name] for name in names]
        if any(p.expanding or p.literal_execute for p in params):
            return None  # rendered per call: nothing to gain from compiling once
        columns = list(statement.selected_columns)
        return cls(
            statement,
            compiled.string,
            names,
            tuple(p.type.dialect_impl(dialect).bind_processor(dialect) for p in params),
            {n: p.effective_value for n, p in zip(names, params, strict=True) if not p.required},
            SimpleResultMetaData(statement.selected_columns.keys()),
            tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns),
        )

    def run(self, dbapi: Any, parameters: Mapping[str, Any]) -> Result[Any]:
        given = [parameters[n] if n in parameters else self.defaults[n] for n in self.names]
        values = [v if f is None else f(v) for v, f in zip(given, self.binds, strict=True)]
        rows = dbapi.execute(self.sql, values).fetchall()
        if any(self.results):
            rows = [
                tuple(v if f is None else f(v) for v, f in zip(row, self.results, strict=True))
                for row in rows
            ]
        return IteratorResult(self.columns, iter(rows))


@dataclass(frozen=True, slots=True)
class _PreparedInsert:
    """An INSERT (an upsert too) without RETURNING, compiled for sqlite3 for the parameter
    names it is run with: the write-behind's statements, each run with every batch."""

    statement: Insert  # held so that its id stays its own while this is cached
    sql: str
    names: tuple[str, ...]  # parameter names, in placeholder order
    binds: tuple[Processor | None, ...]

    @classmethod
    def of(
        cls, statement: Insert, keys: tuple[str, ...], dialect: Dialect
    ) -> _PreparedInsert | None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        if compiled.insert_prefetch or compiled.postfetch or compiled.effective_returning:
            return None  # column defaults computed per row, or rows to give back
        names = tuple(compiled.positiontup or ())
        params = [compiled.binds[name] for name in names]
        if any(p.expanding or p.literal_execute for p in params) or not set(names) <= set(keys):
            return None  # rendered per call, or holding values of its own
        binds = tuple(p.type.dialect_impl(dialect).bind_processor(dialect) for p in params)
        return cls(statement, compiled.string, names, binds)

    def run(self, dbapi: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        pairs = list(zip(self.names, self.binds, strict=True))
        values = [[row[n] if f is None else f(row[n]) for n, f in pairs] for row in rows]
        dbapi.executemany(self.sql, values)


_NO_ROWS = SimpleResultMetaData([])


class InlineConnection:
    """An AsyncConnection's `execute`, run to its end before it returns.

    Outside `InlineSQLite.write` each statement runs in its own implicit transaction
    (autocommit), fetched whole, so no read transaction stays open to hold back the WAL's
    checkpoints. A SELECT built once and run with parameters (a module-level statement with
    bind parameters) is compiled once and run on sqlite3 directly: SQLAlchemy's execution
    costs several times SQLite's answer. So is an INSERT built once, run with rows of the same
    parameter names (its result then holds no rows: nothing here reads an INSERT's).
    """

    def __init__(self, conn: Connection) -> None:
        self.sync = conn
        self._prepared: dict[int, _Prepared | None] = {}
        self._inserts: dict[tuple[int, tuple[str, ...]], _PreparedInsert | None] = {}

    @property
    def dialect(self) -> Dialect:
        return self.sync.dialect

    async def execute(
        self, statement: Executable, parameters: Parameters | None = None
    ) -> Result[Any]:
        if isinstance(parameters, Mapping):
            prepared = self._prepare(statement)
            if prepared is not None:
                return prepared.run(self.sync.connection.dbapi_connection, parameters)
        if isinstance(statement, Insert) and parameters:
            rows = [parameters] if isinstance(parameters, Mapping) else parameters
            insert = self._prepare_insert(statement, tuple(rows[0]))
            if insert is not None:
                insert.run(self.sync.connection.dbapi_connection, rows)
                return IteratorResult(_NO_ROWS, iter(()))
        result = self.sync.execute(statement, parameters)
        return result.freeze()() if result.returns_rows else result

    def _prepare_insert(self, statement: Insert, keys: tuple[str, ...]) -> _PreparedInsert | None:
        key = (id(statement), keys)
        if key not in self._inserts:
            if len(self._inserts) >= _MAX_PREPARED:
                return None  # statements built per call: SQLAlchemy caches those itself
            self._inserts[key] = _PreparedInsert.of(statement, keys, self.dialect)
        found = self._inserts[key]
        return found if found is not None and found.statement is statement else None

    def _prepare(self, statement: Executable) -> _Prepared | None:
        if not isinstance(statement, Select):
            return None
        key = id(statement)
        if key not in self._prepared:
            if len(self._prepared) >= _MAX_PREPARED:
                return None  # statements built per call: SQLAlchemy caches those itself
            self._prepared[key] = _Prepared.of(statement, self.dialect)
        found = self._prepared[key]
        return found if found is not None and found.statement is statement else None


class InlineSQLite:
    """One sqlite3 connection to the database file, opened on first use."""

    def __init__(self, url: URL) -> None:
        self._engine: Engine = create_engine(
            url.set(drivername="sqlite"),
            poolclass=StaticPool,
            hide_parameters=True,
            isolation_level="AUTOCOMMIT",
            # timeout is sqlite3's busy timeout: fail at once rather than block the loop.
            connect_args={"timeout": 0, "check_same_thread": False},
        )
        event.listen(self._engine, "connect", _configure)
        self._conn: InlineConnection | None = None

    def connection(self) -> InlineConnection:
        """The connection (opened now if not yet). Raises SQLAlchemy's errors."""
        if self._conn is None:
            self._conn = InlineConnection(self._engine.connect())
        return self._conn

    def data_version(self) -> int:
        """SQLite's count that moves when another connection commits. Raises sqlite3's
        errors."""
        return int(self._dbapi().execute("PRAGMA data_version").fetchone()[0])

    async def write(self, work: Callable[[InlineConnection], Awaitable[T]]) -> T:
        """Await `work(conn)` in one write transaction, taken at once or not at all (busy
        timeout 0): committed if it returns, rolled back if it raises."""
        conn = self.connection()
        dbapi = self._dbapi()
        dbapi.execute("BEGIN IMMEDIATE")
        try:
            result = await work(conn)
            dbapi.execute("COMMIT")
        except BaseException:
            if dbapi.in_transaction:
                dbapi.execute("ROLLBACK")
            raise
        return result

    def _dbapi(self) -> Any:
        return self.connection().sync.connection.dbapi_connection

    def close(self) -> None:
        if self._conn is not None:
            self._conn.sync.close()
            self._conn = None
        self._engine.dispose()


def _configure(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in CONNECTION_PRAGMAS:
        cursor.execute(f"PRAGMA {pragma}")
    # A commit past the threshold would checkpoint here, fsync included: the pool does it.
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()
