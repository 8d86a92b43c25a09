"""The accounting journal and its replay, on real files and a real database.

A process that died is played by a journal whose lock was let go without its files removed
(what the kernel does for a process killed with -9); the part of it its batches had written
is written by moving the mark in the same transaction, as the write-behind does.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import SessionKey, SessionStore, UsageRecord
from storage.database.tables import journal_marks, usage
from storage.journal import Journal, Mark, dead_journals
from storage.rows import charges, marks
from storage.rows import usage as usage_rows
from tests.storage.factories import FakeClock

SK = SessionKey("anon", "journaled")


def record(i: int) -> UsageRecord:
    return UsageRecord(SK, "gpt-test", 100 + i, 10, 3, at=1_000.0 + i)


def charge(i: int) -> charges.ChargeRow:
    return charges.ChargeRow(SK, 1_000.0 + i, "gpt-test", "request", False, 100 + i, 0, 0, 10)


async def died_with(store: SessionStore, directory: Path, count: int, written: int) -> str:
    """A journal of `count` usage records of which the first `written` reached the database
    in a batch (mark moved with it), left as a killed process leaves it; its name."""
    journal = Journal(directory, "usage")
    for i in range(count):
        journal.append(record(i))

    async def batch(conn: AsyncConnection) -> None:
        await usage_rows.apply(conn, [record(i) for i in range(written)], 2_000.0)
        await marks.advance(conn, Mark(journal.name, written), 2_000.0)

    if written:
        await store.database.write(batch)
    journal.close(remove=False)
    return journal.name


async def counted(store: SessionStore) -> tuple[int, int]:
    session = await store.get_session(SK)
    rows = await store.database.read(
        lambda conn: conn.execute(select(func.count()).select_from(usage))
    )
    return (0 if session is None else session.request_count), int(rows.scalar_one())


async def test_a_dead_journal_is_replayed_once_above_its_mark(
    store: SessionStore, store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "journals"
    dead = await died_with(store, directory, count=10, written=4)
    await store.close()

    # The next start writes the 6 records the batch had not, and removes the journal.
    reopened = await SessionStore.open(store_url, clock=clock, journal_dir=directory)
    assert await counted(reopened) == (10, 10)
    assert list(directory.glob(f"{dead}*")) == []
    await reopened.close()
    assert list(directory.iterdir()) == []  # its own journals went at its clean close
    again = await SessionStore.open(store_url, clock=clock, journal_dir=directory)
    assert await counted(again) == (10, 10)  # nothing replayed twice
    marks_left = await again.database.read(
        lambda conn: conn.execute(select(func.count()).select_from(journal_marks))
    )
    assert marks_left.scalar_one() == 0  # replayed and closed journals leave no mark
    await again.close()


async def test_a_live_journal_is_left_to_its_owner(
    store: SessionStore, store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "journals"
    alive = Journal(directory, "usage")
    alive.append(record(0))
    other = await SessionStore.open(store_url, clock=clock, journal_dir=directory)
    assert await counted(other) == (0, 0)
    assert list(directory.glob(f"{alive.name}.*.log"))
    await other.close()
    alive.close(remove=True)
    assert list(dead_journals(directory)) == []


async def test_a_store_journals_what_it_is_handed_and_removes_it_once_written(
    store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "journals"
    store = await SessionStore.open(store_url, clock=clock, journal_dir=directory)
    for i in range(5):
        store.record_usage_later(record(i))
        store.record_charges_later([charge(i)])
    logs = sorted(p.name.split("-")[0] for p in directory.glob("*.log"))
    assert logs == ["charge", "usage"]
    assert all(p.stat().st_size > 0 for p in directory.glob("*.log"))
    await store.close()
    assert list(directory.iterdir()) == []


async def test_charges_are_replayed_and_a_cut_line_ends_the_journal(
    store: SessionStore, store_url: str, clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "journals"
    journal = Journal(directory, "charge")
    for i in range(3):
        journal.append(charge(i))
    journal.close(remove=False)
    segment = next(directory.glob("*.log"))
    with segment.open("ab") as torn:
        torn.write(b'[4,{"sk":{"scope":"anon","ke')  # the host lost power mid-line
    await store.close()
    reopened = await SessionStore.open(store_url, clock=clock, journal_dir=directory)
    assert [c.uncached for c in await reopened.charges_of(SK)] == [100, 101, 102]
    await reopened.close()


def test_segments_are_dropped_once_the_mark_is_past_them(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "usage", segment_bytes=200)
    for i in range(4):
        journal.append(record(i))
    journal.done(2)  # past 200 bytes: appends go to a new segment from now on
    for i in range(4, 6):
        journal.append(record(i))
    assert len(list(tmp_path.glob("*.log"))) == 2
    journal.done(4)  # the first segment ends at seq 4
    assert not list(tmp_path.glob("*.0.log"))
    journal.close(remove=False)
    (dead,) = dead_journals(tmp_path)
    assert [seq for seq, _ in dead.lines()] == [5, 6]
    dead.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_dead_journal_goes_to_one_replayer_at_a_time(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "usage")
    journal.append(record(0))
    journal.close(remove=False)
    (first,) = dead_journals(tmp_path)
    assert list(dead_journals(tmp_path)) == []  # another process starting meanwhile skips it
    first.release()  # a replay cut short: the journal is there for the next start
    (again,) = dead_journals(tmp_path)
    assert [seq for seq, _ in again.lines()] == [1]
    again.remove()
    assert list(dead_journals(tmp_path)) == [] and list(tmp_path.iterdir()) == []
