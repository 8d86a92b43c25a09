"""Per-session lock for compression: an in-process asyncio.Lock plus a database lease.

The asyncio.Lock orders this process's tasks (FIFO) without touching the database; the lease
row orders workers and replicas. Hold it only around compression and the checkpoint write,
never across an upstream generation. While held, a background task refreshes the lease every
ttl/3 so a long summary call does not let it expire; expiry frees the lease of a crashed worker.
A lease whose holder is a dead process of this machine (a restarted container, a respawned
worker) is taken over at once instead (storage.database.owners).

A request may pass through several compressions (on arrival, then after each overflow); inside
`wait_budget(s)` all the lock waits of the current task together last at most s seconds.

Failing to get the lock is not an error for the request: `hold` yields False and the caller
goes on uncompressed (or waits for the other path's checkpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from storage.database.owners import holder_is_dead, new_owner, parse_owner
from storage.errors import LockTimeout, StorageError
from storage.records import SessionKey
from storage.store import SessionStore

logger = logging.getLogger("ctxgate.storage")

_MAX_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class _Budget:
    task: asyncio.Task[object] | None
    deadline: float


_budget: ContextVar[_Budget | None] = ContextVar("ctxgate_lock_budget", default=None)


def wait_budget(seconds: float) -> WaitBudget:
    """Bound the total time the current task waits for session locks within this block.

    Tasks it starts (a background compression) keep their own `wait_s`: the budget is the
    request's, not theirs.
    """
    return WaitBudget(seconds)


class WaitBudget:
    """`wait_budget`'s block (a class, not a generator: it is entered by every request)."""

    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._token: Token[_Budget | None] | None = None

    def __enter__(self) -> None:
        deadline = asyncio.get_running_loop().time() + self._seconds
        self._token = _budget.set(_Budget(asyncio.current_task(), deadline))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _budget.reset(self._token)
            self._token = None


def _deadline(wait_s: float) -> float:
    now = asyncio.get_running_loop().time()
    budget = _budget.get()
    if budget is None or budget.task is not asyncio.current_task():
        return now + wait_s
    return min(now + wait_s, budget.deadline)


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
        self._me = new_owner()
        self.owner = owner or str(self._me)
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
        deadline = _deadline(wait_s)
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

    async def release_dead_holders(self) -> int:
        """Free the leases of dead processes of this machine (run at start-up); how many."""
        try:
            holders = await self._store.lease_owners()
            dead = [h for h in holders if h != self.owner and holder_is_dead(h, self._me)]
            freed = await self._store.release_leases_of(dead)
        except StorageError as exc:
            logger.warning("could not look for leases of crashed processes: %s", exc)
            return 0
        if freed:
            logger.warning("freed %d session lease(s) left by a crashed ctxgate process", freed)
        return freed

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
        checked_holder = False
        while True:
            try:
                if await self._store.acquire_lease(sk, self.owner, self._ttl_s):
                    return True
                if not checked_holder:
                    checked_holder = True
                    if await self._take_from_dead(sk):
                        return True
            except StorageError as exc:
                logger.warning("session lease unavailable, going on without it: %s", exc)
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL_S)

    async def _take_from_dead(self, sk: SessionKey) -> bool:
        """Take the lease over if its holder is a process of this machine that has ended."""
        if parse_owner(self.owner) is None:
            return False  # an owner id given by the caller: it cannot be told apart
        holder = await self._store.lease_holder(sk)
        if holder is None or holder == self.owner or not holder_is_dead(holder, self._me):
            return False
        taken = await self._store.take_over_lease(sk, holder, self.owner, self._ttl_s)
        if taken:
            logger.warning("took over a session lease left by a crashed ctxgate process")
        return taken

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
