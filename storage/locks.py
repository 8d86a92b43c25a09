"""Per-session lock for compression: an in-process asyncio.Lock plus a database lease.

The asyncio.Lock orders this process's tasks (FIFO) without touching the database; the lease
row orders workers and replicas. Hold it only around compression and the checkpoint write,
never across an upstream generation. While held, a background task refreshes the lease every
ttl/3 so a long summary call does not let it expire; expiry frees the lease of a crashed worker.

Failing to get the lock is not an error for the request: `hold` yields False and the caller
goes on uncompressed (or waits for the other path's checkpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from storage.errors import LockTimeout, StorageError
from storage.records import SessionKey
from storage.store import SessionStore

logger = logging.getLogger("ctxgate.storage")

_MAX_POLL_S = 0.5


@dataclass(slots=True)
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class SessionLocks:
    """Session locks for one process (one owner id). Entries exist only while in use."""

    def __init__(
        self,
        store: SessionStore,
        *,
        owner: str | None = None,
        ttl_s: float = 30.0,
        poll_s: float = 0.05,
    ) -> None:
        self.owner = owner or uuid.uuid4().hex
        self._store = store
        self._ttl_s = ttl_s
        self._poll_s = poll_s
        self._entries: dict[SessionKey, _Entry] = {}
        self.leases_lost = 0

    @property
    def keys_in_use(self) -> int:
        """Sessions with a holder or a waiter right now (0 when idle: nothing leaks)."""
        return len(self._entries)

    @contextlib.asynccontextmanager
    async def hold(self, sk: SessionKey, wait_s: float = 5.0) -> AsyncIterator[bool]:
        """Yield True while holding the session's lock, or False if not got within wait_s.

        Released on exit, including on error or cancellation.
        """
        deadline = asyncio.get_running_loop().time() + wait_s
        entry = self._checkout(sk)
        try:
            if not await _acquire_local(entry.lock, deadline):
                yield False
                return
            try:
                if not await self._take_lease(sk, deadline):
                    yield False
                    return
                keeper = asyncio.create_task(self._keep_alive(sk), name="ctxgate-lease")
                try:
                    yield True
                finally:
                    keeper.cancel()
                    await asyncio.gather(keeper, return_exceptions=True)
                    await self._release(sk)
            finally:
                entry.lock.release()
        finally:
            self._checkin(sk, entry)

    @contextlib.asynccontextmanager
    async def require(self, sk: SessionKey, wait_s: float = 5.0) -> AsyncIterator[None]:
        """Like hold(), but raise LockTimeout instead of yielding False."""
        async with self.hold(sk, wait_s) as got:
            if not got:
                raise LockTimeout(f"session lock not acquired within {wait_s:g} s")
            yield

    def _checkout(self, sk: SessionKey) -> _Entry:
        entry = self._entries.setdefault(sk, _Entry())
        entry.users += 1
        return entry

    def _checkin(self, sk: SessionKey, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._entries[sk]

    async def _take_lease(self, sk: SessionKey, deadline: float) -> bool:
        try:
            return await self._poll_lease(sk, deadline)
        except asyncio.CancelledError:
            await self._release(sk)  # it may have been granted just as we were cancelled
            raise

    async def _poll_lease(self, sk: SessionKey, deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        delay = self._poll_s
        while True:
            try:
                if await self._store.acquire_lease(sk, self.owner, self._ttl_s):
                    return True
            except StorageError as exc:
                logger.warning("session lease unavailable, going on without it: %s", exc)
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL_S)

    async def _keep_alive(self, sk: SessionKey) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            try:
                still_ours = await self._store.refresh_lease(sk, self.owner, self._ttl_s)
            except StorageError as exc:
                logger.warning("session lease refresh failed (will retry): %s", exc)
                continue
            if not still_ours:
                self.leases_lost += 1
                logger.warning("session lease expired and was taken by another worker")
                return

    async def _release(self, sk: SessionKey) -> None:
        try:
            await self._store.release_lease(sk, self.owner)
        except StorageError as exc:
            # The lease expires on its own after ttl_s.
            logger.warning("session lease release failed: %s", exc)


async def _acquire_local(lock: asyncio.Lock, deadline: float) -> bool:
    remaining = deadline - asyncio.get_running_loop().time()
    try:
        async with asyncio.timeout(max(remaining, 0.0)):
            await lock.acquire()
    except TimeoutError:
        return False
    return True
