"""Journal marks: how far each accounting journal (storage.journal) is in the tables."""

from __future__ import annotations

import functools

from sqlalchemy import Executable, bindparam, delete, select

from storage.database.db import insert_for
from storage.database.inline import Executor
from storage.database.tables import journal_marks
from storage.journal import Mark


@functools.cache
def _advance(dialect: str) -> Executable:
    """Built once per dialect: it runs with every batch the write-behind writes."""
    names = ("journal", "seq", "updated_at")
    stmt = insert_for(dialect, journal_marks).values({n: bindparam(n) for n in names})
    return stmt.on_conflict_do_update(
        index_elements=[journal_marks.c.journal],
        set_={"seq": stmt.excluded.seq, "updated_at": stmt.excluded.updated_at},
    )


async def advance(conn: Executor, mark: Mark, now: float) -> None:
    """Record that the journal's records up to `mark.seq` are written (in their transaction)."""
    params = {"journal": mark.journal, "seq": mark.seq, "updated_at": now}
    await conn.execute(_advance(conn.dialect.name), params)


async def written(conn: Executor, journal: str) -> int:
    """The journal's mark (0: none of it written), locked until the transaction ends where
    the database can (PostgreSQL): a replay waits for a batch of its dead owner still being
    committed, then sees its mark."""
    stmt = select(journal_marks.c.seq).where(journal_marks.c.journal == journal)
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    found = (await conn.execute(stmt)).first()
    return 0 if found is None else int(found[0])


async def forget(conn: Executor, journal: str) -> None:
    """Drop the mark of a journal whose files are gone."""
    await conn.execute(delete(journal_marks).where(journal_marks.c.journal == journal))
