"""Schema creation plus a short ordered list of migrations, recorded in schema_version.

`metadata.create_all` always builds the current schema, so a fresh database records every
migration as applied without running it; an existing one runs only those it has not seen.
Add a step by appending a function decorated with @migration (never reorder or remove one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, insert, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.tables import (
    journal_marks,
    metadata,
    retention_turns,
    schema_version,
    usage_daily,
)
from storage.rows import charges as savings
from storage.rows import daily, search, switches

# Any constant: serialises concurrent `open()`s of one PostgreSQL database, whose
# CREATE TABLEs would otherwise race on the catalog.
_PG_SCHEMA_LOCK = 0x637478676174


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    apply: Callable[[Connection], None]


MIGRATIONS: list[Migration] = []


def migration(fn: Callable[[Connection], None]) -> Callable[[Connection], None]:
    MIGRATIONS.append(Migration(len(MIGRATIONS) + 1, fn.__name__, fn))
    return fn


@migration
def baseline(conn: Connection) -> None:
    """The schema as create_all builds it in the first release: nothing to alter."""


async def ensure_schema(
    conn: AsyncConnection, now: float, steps: Sequence[Migration] = MIGRATIONS
) -> list[int]:
    """Create missing tables and apply pending steps; returns the versions applied now.

    Runs inside the caller's write transaction, so a failed step leaves nothing behind.
    """
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
    fresh = not await conn.run_sync(lambda c: inspect(c).has_table("sessions"))
    await conn.run_sync(metadata.create_all)
    done = set((await conn.execute(select(schema_version.c.version))).scalars())
    applied = []
    for step in steps:
        if step.version in done:
            continue
        if not fresh:
            await conn.run_sync(step.apply)
        await conn.execute(
            insert(schema_version).values(version=step.version, name=step.name, applied_at=now)
        )
        applied.append(step.version)
    return applied


@migration
def checkpoint_sources(conn: Connection) -> None:
    """Checkpoints say which client position each replacement message holds verbatim."""
    conn.execute(text("ALTER TABLE checkpoints ADD COLUMN sources TEXT"))


@migration
def archive_search(conn: Connection) -> None:
    """Recall searches the archive through the database's full-text index: build it for the
    rows archived before it existed."""
    search.rebuild(conn)


@migration
def session_lineages(conn: Connection) -> None:
    """Rows name their root session id, the row a fork shares its history with and the
    prefix of their latest request. A rotation child takes its parent's root."""
    for column, kind in (
        ("root_key", "VARCHAR"),
        ("fork_of", "VARCHAR"),
        ("fork_len", "INTEGER"),
        ("tip_len", "INTEGER"),
        ("tip_digest", "VARCHAR"),
    ):
        conn.execute(text(f"ALTER TABLE sessions ADD COLUMN {column} {kind}"))
    conn.execute(text("UPDATE sessions SET root_key = key WHERE parent_key IS NULL"))
    parent = "FROM sessions AS p WHERE p.scope = sessions.scope AND p.key = sessions.parent_key"
    for _ in range(64):  # one rotation generation per pass; chains are short
        moved = conn.execute(
            text(
                f"UPDATE sessions SET root_key = (SELECT p.root_key {parent}) "
                f"WHERE root_key IS NULL AND EXISTS (SELECT 1 {parent} "
                "AND p.root_key IS NOT NULL)"
            )
        )
        if not moved.rowcount:
            break
    conn.execute(text("UPDATE sessions SET root_key = key WHERE root_key IS NULL"))
    conn.execute(text("CREATE INDEX ix_sessions_scope_root ON sessions (scope, root_key)"))


@migration
def charges_and_shadow_checks(conn: Connection) -> None:
    """Charges by billing tier (savings in money) and shadow checks get their tables."""
    savings.create(conn)


@migration
def retention(conn: Connection) -> None:
    """Retention keeps deleted sessions' usage as daily totals and takes turns to sweep in a
    table of its own; deleting a checkpoint finds
    the archive rows and events that name it by index instead of scanning their tables."""
    usage_daily.create(conn, checkfirst=True)
    retention_turns.create(conn, checkfirst=True)
    for name, table in (
        ("ix_archive_checkpoint", "archived_messages"),
        ("ix_events_checkpoint", "events"),
    ):
        conn.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (checkpoint_id)"))


@migration
def archive_search_buckets(conn: Connection) -> None:
    """PostgreSQL's search index holds each row's bucket of ids, so a search reads the newest
    matches first (SQLite's index is ordered already)."""
    search.add_buckets(conn)


@migration
def session_switches(conn: Connection) -> None:
    """Compression can be switched off per session: the switches get their table."""
    switches.create(conn)


@migration
def accounting(conn: Connection) -> None:
    """Accounting journals record how far the tables hold them (storage.journal); deleted
    sessions' charges and shadow checks are kept as daily totals (storage.rows.daily)."""
    journal_marks.create(conn, checkfirst=True)
    daily.create(conn)
