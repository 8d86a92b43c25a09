"""Write-behind for usage records and charges: the response path hands a record over and never
waits.

One background task drains a bounded queue. A batch goes out once its oldest record has waited
`linger_s` (counted from its hand-over, so time spent behind the previous write counts too), so
that whatever arrives meanwhile goes out with it, in one transaction:
a busy session costs one upsert per batch instead of one per request, and the database
(one writer at a time on SQLite) sees few commits. A transaction costs ~2 ms of event-loop
time (each statement is a round trip to aiosqlite's thread), so half a second of linger keeps
that off the requests of a busy proxy; nothing on the request path reads these rows back
(the session cache applies each record as it is handed over). `flush` cuts the linger short.

With a journal (storage.journal) each record is also appended to a local file as it is handed
over, and each batch's transaction moves the journal's mark: what a process killed during
the linger held is replayed from its journal by the next process to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from storage.errors import DatabaseBusy, StorageError
from storage.journal import Journal, Mark

logger = logging.getLogger("ctxgate.storage")

Record = TypeVar("Record")


class UsageWriter(Generic[Record]):
    def __init__(
        self,
        write: Callable[[list[Record], Mark | None], Awaitable[None]],
        *,
        journal: Journal | None = None,
        max_batch: int = 1000,
        max_pending: int = 100_000,
        busy_retries: int = 3,
        linger_s: float = 0.5,
        what: str = "usage",
    ) -> None:
        self._write = write
        self._journal = journal
        self._what = what  # what the records are, in task names and log lines
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._hurry = asyncio.Event()
        self._flushers = 0
        self._busy_retries = busy_retries
        # Each record with the loop time it was handed over at and its seq in the journal.
        self._queue: asyncio.Queue[tuple[float, int, Record]] = asyncio.Queue(max_pending)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.written = 0
        self.failed = 0
        self.dropped = 0

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"ctxgate-{self._what}"
        )

    def submit(self, record: Record) -> None:
        """Enqueue without waiting; when closed or full the record is dropped and counted."""
        if self._closed or self._task is None or self._task.done():
            self._drop(f"the {self._what} writer is not running")
            return
        if self._queue.full():
            self._drop(f"the {self._what} queue is full")
            return
        self._queue.put_nowait((self._task.get_loop().time(), self._journaled(record), record))

    def _journaled(self, record: Record) -> int:
        """The record's seq in the journal (0: none, or it could not be written)."""
        if self._journal is None:
            return 0
        try:
            return self._journal.append(record)
        except (OSError, TypeError) as exc:
            # Without the journal a crash loses the linger's records, as it would anyway.
            logger.error("%s journal stopped: %s", self._what, exc)
            self._journal.close(remove=False)
            self._journal = None
            return 0

    async def flush(self) -> None:
        """Wait until every record submitted so far has been written (or given up on)."""
        if self._task is None or self._task.done():
            return
        self._flushers += 1
        self._hurry.set()
        joined = asyncio.ensure_future(self._queue.join())
        try:
            # A writer task that died must not leave the caller waiting forever.
            await asyncio.wait({joined, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()
            self._flushers -= 1
            if not self._flushers:
                self._hurry.clear()

    async def close(self) -> Journal | None:
        """Write out what is queued and stop; the journal, closed and its files removed (its
        mark is the caller's to forget), or None."""
        self._closed = True
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        journal, self._journal = self._journal, None
        if journal is not None:
            journal.close(remove=True)
        return journal

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            handed_at, seq, first = await self._queue.get()
            batch = [first]
            # A record that waited behind the previous write lingers only what is left: what
            # a crash can lose stays bounded by the linger plus one write.
            linger = self._linger_s - (loop.time() - handed_at)
            if linger > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), linger)
            while len(batch) < self._max_batch and not self._queue.empty():
                _, seq, record = self._queue.get_nowait()
                batch.append(record)
            journal = self._journal
            mark = Mark(journal.name, seq) if journal is not None and seq else None
            try:
                await self._write_batch(batch, mark)
            finally:
                if mark is not None and journal is not None and journal is self._journal:
                    journal.done(mark.seq)
                for _ in batch:
                    self._queue.task_done()

    async def _write_batch(self, batch: list[Record], mark: Mark | None) -> None:
        for attempt in range(self._busy_retries + 1):
            try:
                await self._write(batch, mark)
            except DatabaseBusy as exc:
                error: Exception = exc
                if attempt < self._busy_retries:
                    await asyncio.sleep(0.1 * 4**attempt)
                continue
            except StorageError as exc:
                error = exc
                break
            except Exception as exc:  # a bug here must not stop usage recording for good
                logger.exception("%s write-behind failed unexpectedly", self._what)
                error = exc
                break
            self.written += len(batch)
            return
        if len(batch) > 1 and not isinstance(error, DatabaseBusy):
            # One bad record must not cost the whole batch; the mark goes with the last one.
            for i, record in enumerate(batch):
                await self._write_batch([record], mark if i == len(batch) - 1 else None)
            return
        self.failed += len(batch)
        logger.error("%s write-behind dropped %d record(s): %s", self._what, len(batch), error)

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            logger.warning("%s; %d %s record(s) dropped so far", why, self.dropped, self._what)
