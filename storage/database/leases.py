"""Database leases: a row per locked session with an owner and an expiry.

Each call is one statement in its own short transaction and never waits for the holder:
taking a lease is an upsert that only overwrites an expired row (or our own), so on both
SQLite and PostgreSQL two contenders cannot both see their owner in RETURNING.
Expiry frees the lease of a crashed worker; one on this machine is also taken over at once
(see storage.database.owners).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import upsert
from storage.database.tables import leases
from storage.records import SessionKey

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


async def holder(conn: AsyncConnection, sk: SessionKey) -> str | None:
    """The owner of the session's lease row, expired or not (None: no row)."""
    stmt = select(leases.c.owner).where(leases.c.scope == sk.scope, leases.c.key == sk.key)
    return (await conn.execute(stmt)).scalar_one_or_none()


async def take_over(
    conn: AsyncConnection, sk: SessionKey, dead: str, owner: str, ttl_s: float, now: float
) -> bool:
    """Move the lease from `dead` to `owner`; False when `dead` no longer holds it."""
    stmt = update(leases).where(*_where(sk, dead)).values(owner=owner, expires_at=now + ttl_s)
    return bool((await conn.execute(stmt)).rowcount)


async def owners(conn: AsyncConnection) -> list[str]:
    """Every distinct lease holder."""
    return list((await conn.execute(select(leases.c.owner).distinct())).scalars())


async def release_all(conn: AsyncConnection, of: Collection[str]) -> int:
    """Delete every lease the given owners hold; the number deleted."""
    if not of:
        return 0
    result = await conn.execute(delete(leases).where(leases.c.owner.in_(list(of))))
    return int(result.rowcount or 0)
