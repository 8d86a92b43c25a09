"""The write-behind queue on its own, fed a plain coroutine as its database."""

import asyncio

from storage import DatabaseBusy, SessionKey, StorageError, UsageRecord
from storage.journal import Mark
from storage.writer import UsageWriter

SK = SessionKey("scope", "s")


def record(i: int) -> UsageRecord:
    return UsageRecord(SK, "m", i, 1, 1, at=float(i))


class FlakyDatabase:
    """Fails the first `busy` writes with DatabaseBusy, and any batch holding a poisoned record."""

    def __init__(self, busy: int = 0, poisoned: int | None = None) -> None:
        self.busy = busy
        self.poisoned = poisoned
        self.rows: list[int] = []

    async def write(self, batch: list[UsageRecord], _mark: Mark | None = None) -> None:
        if self.busy:
            self.busy -= 1
            raise DatabaseBusy("database is locked")
        if any(u.prompt_tokens == self.poisoned for u in batch):
            raise StorageError("constraint failed")
        self.rows.extend(u.prompt_tokens for u in batch)


async def test_records_submitted_together_go_out_in_one_batch() -> None:
    db = FlakyDatabase()
    batches: list[int] = []

    async def write(batch: list[UsageRecord], _mark: Mark | None = None) -> None:
        batches.append(len(batch))
        await db.write(batch)

    writer = UsageWriter(write, max_batch=400)
    writer.start()
    for i in range(1000):
        writer.submit(record(i))
    await writer.close()
    assert db.rows == list(range(1000)) and batches == [400, 400, 200]


async def test_busy_database_is_retried() -> None:
    db = FlakyDatabase(busy=2)
    writer = UsageWriter(db.write)
    writer.start()
    writer.submit(record(1))
    await writer.flush()
    assert db.rows == [1] and (writer.written, writer.failed) == (1, 0)
    await writer.close()


async def test_a_poisoned_record_costs_only_itself() -> None:
    db = FlakyDatabase(poisoned=3)
    writer = UsageWriter(db.write)
    writer.start()
    for i in range(6):
        writer.submit(record(i))
    await writer.flush()
    assert db.rows == [0, 1, 2, 4, 5] and (writer.written, writer.failed) == (5, 1)
    await writer.close()


async def test_an_unexpected_error_does_not_stop_the_writer() -> None:
    calls = 0

    async def write(batch: list[UsageRecord], _mark: Mark | None = None) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug")

    writer = UsageWriter(write)
    writer.start()
    writer.submit(record(1))
    await writer.flush()
    writer.submit(record(2))
    await writer.flush()
    assert (writer.failed, writer.written) == (1, 1)
    await writer.close()


async def test_a_full_queue_drops_and_counts() -> None:
    gate = asyncio.Event()

    async def write(batch: list[UsageRecord], _mark: Mark | None = None) -> None:
        await gate.wait()

    writer = UsageWriter(write, max_pending=3)
    writer.start()
    writer.submit(record(0))
    await asyncio.sleep(0)  # the writer takes record 0 and waits on the gate
    for i in range(1, 6):
        writer.submit(record(i))
    assert (writer.pending, writer.dropped) == (3, 2)
    gate.set()
    await writer.close()
    assert writer.written == 4


async def test_a_record_waiting_behind_a_slow_write_lingers_only_what_is_left() -> None:
    """What a crash can lose is bounded by the linger plus one write: a record handed over
    while the previous batch was being written does not start a fresh linger after it."""
    loop = asyncio.get_running_loop()
    committed: dict[int, float] = {}

    async def slow_write(batch: list[UsageRecord], _mark: Mark | None = None) -> None:
        await asyncio.sleep(1.0)  # a busy database
        for u in batch:
            committed[u.prompt_tokens] = loop.time()

    writer = UsageWriter(slow_write, linger_s=1.0)
    writer.start()
    writer.submit(record(1))
    await asyncio.sleep(1.05)  # the first batch is being written now
    handed = loop.time()
    writer.submit(record(2))
    await writer_idle(writer, 6.0)
    # A fresh linger after the write would commit ~2.95 s after the hand-over (the write's
    # 0.95 s left, 1 s linger, 1 s write); the linger runs out behind the write: ~1.95 s.
    assert committed[2] - handed < 2.45, committed[2] - handed
    await writer.close()


async def writer_idle(writer: UsageWriter, limit_s: float) -> None:
    """Wait, without hurrying the writer, until every record handed over is written."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while writer.pending or writer.written < 2:
        assert asyncio.get_running_loop().time() < deadline, "the writer never wrote"
        await asyncio.sleep(0.02)
