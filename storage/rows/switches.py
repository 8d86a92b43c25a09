"""Per-session switches: compression turned off for one session (its client's session id).

Keyed by (scope, key) like leases, not hung off a session row: a switch may be set before the
session's first request, and holds for every lineage and rotation of the client's session.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Double,
    String,
    Table,
    bindparam,
    delete,
    exists,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import upsert
from storage.database.inline import Executor
from storage.database.tables import metadata
from storage.records import SessionKey

session_switches = Table(
    "session_switches",
    metadata,
    Column("scope", String, primary_key=True),
    Column("key", String, primary_key=True),
    Column("compression_off", Boolean, nullable=False),
    Column("updated_at", Double, nullable=False),
)


def create(conn: Connection) -> None:
    """The table, on a database made before it existed."""
    session_switches.create(conn, checkfirst=True)


def _where(sk: SessionKey) -> object:
    return (session_switches.c.scope == sk.scope) & (session_switches.c.key == sk.key)


# One session's switch, built once: every request of a session not seen lately reads it, and
# a statement built once runs on SQLite without SQLAlchemy's per-statement work
# (storage.database.inline).
_ONE_OFF = select(session_switches.c.scope, session_switches.c.key).where(
    session_switches.c.compression_off,
    session_switches.c.scope == bindparam("scope"),
    session_switches.c.key == bindparam("key"),
)


# Whether any session has its compression off: most databases hold none, and then no session's
# own switch needs reading.
_ANY_OFF = select(exists().where(session_switches.c.compression_off))


async def any_off(conn: Executor) -> bool:
    """Whether any session's compression is switched off."""
    return bool((await conn.execute(_ANY_OFF)).scalar())


async def compression_off(conn: Executor, keys: Sequence[SessionKey]) -> set[SessionKey]:
    """Those of `keys` whose compression is switched off."""
    if not keys:
        return set()
    if len(keys) == 1:
        rows = await conn.execute(_ONE_OFF, {"scope": keys[0].scope, "key": keys[0].key})
        return {SessionKey(r.scope, r.key) for r in rows}
    stmt = select(session_switches.c.scope, session_switches.c.key).where(
        session_switches.c.compression_off,
        or_(*(_where(sk) for sk in keys)),  # type: ignore[arg-type]
    )
    return {SessionKey(r.scope, r.key) for r in await conn.execute(stmt)}


async def set_compression(conn: AsyncConnection, sk: SessionKey, off: bool, now: float) -> None:
    """Switch the session's compression off, or back on (the default: no row)."""
    if not off:
        await conn.execute(delete(session_switches).where(_where(sk)))  # type: ignore[arg-type]
        return
    stmt = upsert(conn, session_switches).values(
        scope=sk.scope, key=sk.key, compression_off=True, updated_at=now
    )
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[session_switches.c.scope, session_switches.c.key],
            set_={"compression_off": True, "updated_at": stmt.excluded.updated_at},
        )
    )
