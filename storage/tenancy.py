"""Tenancy: the store's side that hands out session leases (storage.database.leases), the rows
that order workers and replicas around one session's compression (storage.locks holds them).

`Tenancy` is a part of SessionStore (storage.store), not an object of its own: it holds no
state and reaches the store's database and clock through the attributes declared below.
Every call is one short transaction that never waits for a lease's holder.

Imports storage's own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from storage.database import leases
from storage.database.db import Database
from storage.records import SessionKey


class Tenancy:
    """Session leases: take, refresh, release, take over from the dead."""

    _db: Database
    _clock: Callable[[], float]

    async def acquire_lease(self, sk: SessionKey, owner: str, ttl_s: float) -> bool:
        """Take the session's lease if free or expired; never waits for its holder."""
        return await self._db.write(
            lambda conn: leases.acquire(conn, sk, owner, ttl_s, self._clock())
        )

    async def refresh_lease(self, sk: SessionKey, owner: str, ttl_s: float) -> bool:
        """Extend our lease by ttl_s from now; False if it is no longer ours."""
        return await self._db.write(
            lambda conn: leases.refresh(conn, sk, owner, ttl_s, self._clock())
        )

    async def release_lease(self, sk: SessionKey, owner: str) -> None:
        await self._db.write(lambda conn: leases.release(conn, sk, owner))

    async def lease_holder(self, sk: SessionKey) -> str | None:
        """Who holds the session's lease row (expired or not); None when nobody does."""
        return await self._db.read(lambda conn: leases.holder(conn, sk))

    async def take_over_lease(self, sk: SessionKey, dead: str, owner: str, ttl_s: float) -> bool:
        """Take a lease from a holder known to be dead; False if it no longer holds it."""
        return await self._db.write(
            lambda conn: leases.take_over(conn, sk, dead, owner, ttl_s, self._clock())
        )

    async def lease_owners(self) -> list[str]:
        return await self._db.read(leases.owners)

    async def release_leases_of(self, owners: Collection[str]) -> int:
        """Free every lease of the given (dead) owners; how many were freed."""
        return await self._db.write(lambda conn: leases.release_all(conn, owners))
