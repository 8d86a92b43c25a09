"""The retention sweep: deletes the sessions idle longer than a policy allows, periodically,
on one process at a time.

Processes take turns through a row lease (table `retention_turns`) that lasts one interval and
is not given back when the sweep ends: whoever runs, across processes on one SQLite file or
replicas on one PostgreSQL database, the database is swept about once per interval, and a
restarted process does not sweep again before the interval is over. Each process looks every
quarter interval. The cutoff and the turn follow the store's clock, so a simulated clock
drives both.

What the steps delete and how SQLite's space is given back: storage.rows.retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from storage.errors import StorageError
from storage.rows import daily, retention
from storage.rows.retention import DailyUsage
from storage.store import SessionStore

logger = logging.getLogger("ctxgate.storage")

Turn = Callable[[AsyncConnection, str, float, float], Awaitable[bool]]
T = TypeVar("T")
_CHECK_TURN_EVERY = 32  # purge steps between two extensions of the sweep's turn
_MAX_MERGE_STEPS = 16  # full-text index merges per sweep; the next sweep goes on


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long sessions are kept and how the sweep runs."""

    idle_s: float  # a session idle longer than this is deleted
    keep_daily_usage: bool = True  # first add its usage into the daily totals
    interval_s: float = 3600.0  # one sweep per interval, across all processes
    batch_sessions: int = 32  # sessions retired per write transaction
    purge_rows: int = 64  # rows of retired sessions deleted per write transaction
    vacuum_pages: int = 256  # SQLite pages given back per write transaction


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep did."""

    sessions: int  # client session ids deleted, each with all its lineages
    rows: int  # session rows among them
    usage_rows: int  # usage rows added into the daily totals first
    purged: int  # rows deleted: archive, events, usage, checkpoints, then the session rows
    merges: int  # steps compacting the full-text index after (SQLite; 0 on PostgreSQL)
    writes: int  # write transactions that retired, deleted or gave pages back
    longest_write_s: float  # the longest of them: how long a request could wait on the sweep
    pages_returned: int  # SQLite pages given back to the file system
    vacuum_s: float  # how long that took
    seconds: float
    orphans: int = 0  # charges and shadow checks deleted that had no session row


class Sweeper:
    """Sweeps one store by `policy`: `sweep()` now, `sweep_if_due()` in its turn, or
    `start()` a task that calls it periodically until `close()`."""

    def __init__(self, store: SessionStore, policy: RetentionPolicy, owner: str) -> None:
        self._store = store
        # The sweep runs its own transactions on the store's database, on the store's clock.
        self._db = store.database
        self._clock = store.clock
        self._policy = policy
        self._owner = owner
        self._converted = False
        self._task: asyncio.Task[None] | None = None
        self.sweeps = 0
        self.last: SweepReport | None = None

    async def sweep(self) -> SweepReport:
        """Delete every session idle past the cutoff, then give the space back (whoever's
        turn it is: an operator's or a test's sweep now)."""
        return await self._sweep(in_turn=False)

    async def sweep_if_due(self) -> SweepReport | None:
        """Sweep when the last sweep's turn (this process's or another's) has run out; None
        when it has not."""
        if not await self._turn(retention.take_turn):
            return None
        return await self._sweep(in_turn=True)

    async def _sweep(self, in_turn: bool) -> SweepReport:
        started = time.perf_counter()
        if not self._converted:
            await retention.make_incremental(self._db)
            self._converted = True
        writes = _Writes()
        done = retention.Batch(0, 0, 0)
        while True:
            batch = await self._retire(writes, self._clock() - self._policy.idle_s)
            if batch is None:
                break
            done = retention.Batch(
                done.sessions + batch.sessions,
                done.rows + batch.rows,
                done.usage_rows + batch.usage_rows,
            )
            if batch.rows == 0 or (in_turn and not await self._still_ours()):
                break  # every candidate was touched meanwhile, or another process sweeps
        orphans = await self._forget_orphans(writes, self._clock() - self._policy.idle_s)
        purged = await self._purge(writes, in_turn)
        merges = await self._merge_index(writes) if purged else 0
        vacuum_started = time.perf_counter()
        returned = await self._give_back(writes) if purged else 0
        report = SweepReport(
            done.sessions,
            done.rows,
            done.usage_rows,
            purged,
            merges,
            writes.count,
            writes.longest_s,
            returned,
            time.perf_counter() - vacuum_started,
            time.perf_counter() - started,
            orphans,
        )
        self.sweeps += 1
        self.last = report
        if report.rows:
            logger.info(
                "retention: deleted %d session(s) (%d rows) idle over %.0f s in %.2f s",
                report.sessions,
                report.rows,
                self._policy.idle_s,
                report.seconds,
            )
        return report

    async def _retire(self, writes: _Writes, cutoff: float) -> retention.Batch | None:
        """Retire the next few idle sessions; None when there are none left."""
        p = self._policy

        async def find(conn: AsyncConnection) -> list[retention.Root]:
            return await retention.idle_roots(conn, cutoff, p.batch_sessions)

        roots = await self._db.read(find)
        if not roots:
            return None

        async def retire(conn: AsyncConnection) -> retention.Batch:
            return await retention.retire_roots(conn, roots, cutoff, p.keep_daily_usage)

        try:
            return await writes.timed(self._db.write(retire))
        finally:
            self._store.forget_cached()  # retired rows must not be answered from memory

    async def _forget_orphans(self, writes: _Writes, cutoff: float) -> int:
        """Delete the charges and shadow checks no session row owns, idle past the cutoff, a
        few keys per transaction; how many rows went."""
        p = self._policy

        async def find(conn: AsyncConnection) -> list[retention.Root]:
            return await retention.orphan_keys(conn, cutoff, p.batch_sessions)

        gone = 0
        while keys := await self._db.read(find):

            async def forget(conn: AsyncConnection, keys: list[retention.Root] = keys) -> int:
                return await daily.forget(conn, keys, p.keep_daily_usage)

            gone += await writes.timed(self._db.write(forget))
        return gone

    async def _purge(self, writes: _Writes, in_turn: bool) -> int:
        """Delete what retired sessions own, `purge_rows` rows per transaction; how many."""

        async def step(conn: AsyncConnection) -> int:
            return await retention.purge_step(conn, self._policy.purge_rows)

        purged = 0
        steps = 0
        while moved := await writes.timed(self._db.write(step)):
            purged += moved
            steps += 1
            if in_turn and steps % _CHECK_TURN_EVERY == 0 and not await self._still_ours():
                break
        return purged

    async def _merge_index(self, writes: _Writes) -> int:
        """Compact the full-text index after its rows were deleted, a bounded step at a time;
        how many steps ran."""

        if self._db.dialect != "sqlite":
            return 0

        async def step(conn: AsyncConnection) -> bool:
            return await retention.merge_index(conn, self._policy.vacuum_pages)

        for n in range(_MAX_MERGE_STEPS):
            if not await writes.timed(self._db.write(step)):
                return n + 1
        return _MAX_MERGE_STEPS

    async def _give_back(self, writes: _Writes) -> int:
        """Return SQLite's free pages to the file system, `vacuum_pages` per transaction."""
        if not await retention.vacuumable(self._db):
            return 0
        pages = self._policy.vacuum_pages
        returned = 0
        while (moved := await writes.timed(retention.give_back(self._db, pages))) > 0:
            returned += moved
        await self._db.checkpoint()  # the file shrinks once the WAL is copied back into it
        return returned

    async def _still_ours(self) -> bool:
        """Extend the turn over a long sweep; False once another process has it."""
        return await self._turn(retention.extend_turn)

    async def _turn(self, step: Turn) -> bool:
        async def run(conn: AsyncConnection) -> bool:
            return await step(conn, self._owner, self._policy.interval_s, self._clock())

        return await self._db.write(run)

    def start(self) -> None:
        """Sweep now and then every interval in a task of this event loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ctxgate-retention")

    async def close(self) -> None:
        """Stop the periodic task; a transaction under way finishes first (Database.write)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        poll_s = self._policy.interval_s / 4
        while True:
            try:
                await self.sweep_if_due()
            except StorageError as exc:
                logger.warning("retention sweep failed (will retry): %s", exc)
            except Exception:  # the task must outlive a bug in one sweep
                logger.exception("retention sweep failed (will retry)")
            await asyncio.sleep(poll_s)


class _Writes:
    """How many write transactions a sweep ran, and the longest."""

    def __init__(self) -> None:
        self.count = 0
        self.longest_s = 0.0

    async def timed(self, write: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await write
        finally:
            self.count += 1
            self.longest_s = max(self.longest_s, time.perf_counter() - started)


async def daily_usage(store: SessionStore, since: str | None = None) -> list[DailyUsage]:
    """The usage totals kept of deleted sessions, by UTC day (from `since`, "YYYY-MM-DD")."""

    async def read(conn: AsyncConnection) -> list[DailyUsage]:
        return await retention.daily_usage(conn, since)

    return await store.database.read(read)
