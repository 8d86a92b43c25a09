"""Database leases: a row per locked session with an owner and an expiry.

Each call is one statement in its own short transaction and never waits for the holder:
taking a lease is an upsert that only overwrites an expired row (or our own), so on both
SQLite and PostgreSQL two contenders cannot both see their owner in RETURNING.
Expiry is what frees the lease of a crashed worker.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, delete, or_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.db import upsert
from storage.records import SessionKey
from storage.tables import leases

_key = (leases.c.scope, leases.c.key)


def _where(sk: SessionKey, owner: str) -> list[ColumnElement[bool]]:
    return [leases.c.scope == sk.scope, leases.c.key == sk.key, leases.c.owner == owner]


async def acquire(
    conn: AsyncConnection, sk: SessionKey, owner: str, ttl_s: float, now: float
) -> bool:
    """Take the lease if it is free, expired, or already ours (re-acquiring extends it)."""
    stmt = upsert(conn, leases).values(
        scope=sk.scope, key=sk.key, owner=owner, expires_at=now + ttl_s
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=_key,
        set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at},
        where=or_(leases.c.expires_at <= now, leases.c.owner == owner),
    )
    row = (await conn.execute(stmt.returning(leases.c.owner))).first()
    return row is not None


async def refresh(
    conn: AsyncConnection, sk: SessionKey, owner: str, ttl_s: float, now: float
) -> bool:
    """Extend our lease; False when another owner has taken it (or it was released)."""
    stmt = update(leases).where(*_where(sk, owner)).values(expires_at=now + ttl_s)
    return bool((await conn.execute(stmt)).rowcount)


async def release(conn: AsyncConnection, sk: SessionKey, owner: str) -> None:
    await conn.execute(delete(leases).where(*_where(sk, owner)))
