"""Replaying the accounting journals of processes that died (storage.journal).

A starting process (a replacement worker, the next start of a replica) takes each journal in
its directory whose owner is gone and writes what lies above the journal's mark, a chunk per
transaction that also moves the mark: on one database shared by several processes or
replicas each record is counted once, whoever replays it and however often a replay is cut
short. A record the database refuses outright is skipped (it would be refused forever); a busy
database leaves the journal for the next start. Where a database's processes keep their journals
is `journal_directory`'s to say.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from storage.database.db import Database
from storage.database.inline import Executor
from storage.errors import DatabaseBusy, StorageError
from storage.journal import DeadJournal, Journal, Mark, dead_journals
from storage.records import SessionKey, UsageRecord
from storage.rows import charges, marks, usage

logger = logging.getLogger("ctxgate.storage")

CHUNK = 500  # records per replay transaction

Apply = Callable[[Executor, list[Any], float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Kind:
    """How one kind of journaled record is read back and written."""

    decode: Callable[[dict[str, Any]], Any]
    apply: Apply


def _usage(data: dict[str, Any]) -> UsageRecord:
    return UsageRecord(**(data | {"sk": SessionKey(**data["sk"])}))


def _charge(data: dict[str, Any]) -> charges.ChargeRow:
    return charges.ChargeRow(**(data | {"sk": SessionKey(**data["sk"])}))


async def _apply_charges(conn: Executor, rows: list[Any], _now: float) -> None:
    await charges.add_charges(conn, rows)


KINDS: dict[str, Kind] = {
    "usage": Kind(_usage, usage.apply),
    "charge": Kind(_charge, _apply_charges),
}


@dataclass(frozen=True, slots=True)
class Replayed:
    journals: int
    records: int  # written now
    skipped: int  # already in the database (below the mark) or refused


async def replay_journals(db: Database, directory: Path, clock: Callable[[], float]) -> Replayed:
    """Replay every dead journal in `directory`; what was done."""
    journals = records = skipped = 0
    for dead in dead_journals(directory):
        try:
            written, left = await _replay(db, dead, clock)
        except StorageError as exc:
            logger.warning("accounting journal %s not replayed (next start): %s", dead.name, exc)
            dead.release()
            continue
        dead.remove()
        try:
            await db.write(lambda conn, name=dead.name: marks.forget(conn, name))  # type: ignore[misc]
        except StorageError as exc:  # a row left behind, harmless
            logger.warning("journal mark %s not dropped: %s", dead.name, exc)
        journals += 1
        records += written
        skipped += left
    if journals:
        logger.info("replayed %d accounting record(s) from %d journal(s)", records, journals)
    return Replayed(journals, records, skipped)


async def _replay(db: Database, dead: DeadJournal, clock: Callable[[], float]) -> tuple[int, int]:
    kind = KINDS.get(dead.kind)
    if kind is None:
        raise StorageError(f"unknown journal kind {dead.kind!r}")
    lines = list(dead.lines())
    written = 0
    for start in range(0, len(lines), CHUNK):
        chunk = lines[start : start + CHUNK]
        try:
            written += await _write(db, dead.name, kind, chunk, clock)
        except DatabaseBusy:
            raise
        except (StorageError, TypeError) as exc:
            logger.warning("journal %s: a chunk was refused (%s); record by record", dead.name, exc)
            for line in chunk:
                written += await _write_alone(db, dead.name, kind, line, clock)
    return written, len(lines) - written


async def _write(
    db: Database,
    journal: str,
    kind: Kind,
    lines: Sequence[tuple[int, Any]],
    clock: Callable[[], float],
) -> int:
    """Write the lines above the mark and move the mark past them, in one transaction."""

    async def work(conn: Executor) -> int:
        done = await marks.written(conn, journal)
        fresh = [kind.decode(record) for seq, record in lines if seq > done]
        if fresh:
            await kind.apply(conn, fresh, clock())
        last = max(seq for seq, _ in lines)
        if last > done:
            await marks.advance(conn, Mark(journal, last), clock())
        return len(fresh)

    return await db.write(work)


async def _write_alone(
    db: Database, journal: str, kind: Kind, line: tuple[int, Any], clock: Callable[[], float]
) -> int:
    try:
        return await _write(db, journal, kind, [line], clock)
    except DatabaseBusy:
        raise
    except (StorageError, TypeError) as exc:
        logger.error("journal %s: record %d refused, skipped: %s", journal, line[0], exc)

        async def skip(conn: Executor) -> None:
            if await marks.written(conn, journal) < line[0]:
                await marks.advance(conn, Mark(journal, line[0]), clock())

        await db.write(skip)
        return 0


def open_journal(directory: Path | None, kind: str) -> Journal | None:
    """A journal in `directory`, or None (no directory, or none can be written there: a
    read-only file system; then a crash loses what the write-behind holds, as without)."""
    if directory is None:
        return None
    try:
        return Journal(directory, kind)
    except OSError as exc:
        logger.error("no accounting journal in %s (a crash loses recent usage): %s", directory, exc)
        return None


def journal_directory(url: str) -> Path:
    """Where a process of the database at `url` keeps its accounting journals: beside a
    SQLite file; for PostgreSQL under the working directory (the image's volume), one folder
    per database, so that replicas of another database never replay into this one."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return Path(f"{Path(parsed.database or 'ctxgate.db').expanduser()}.accounting")
    where = f"{parsed.host}:{parsed.port}/{parsed.database}"
    return Path("ctxgate-accounting") / hashlib.sha256(where.encode()).hexdigest()[:16]
