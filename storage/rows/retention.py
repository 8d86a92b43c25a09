"""Retention: what a sweep deletes, in bounded transactions, and SQLite's space given back.

A session here is a client's session id: its own row and the rows of its lineages (rotations
and forks) share its `root_key`, and a live lineage reads its ancestors' archive, so they go
together once the newest of them has been idle past the cutoff, with everything they own:
checkpoints, archive (its search index follows each archive row), events, usage and leases.
Charges and shadow checks, keyed by (scope, key), go too, as do those left without any session
row. Optionally the usage rows are first added into `usage_daily` (per UTC day, scope and
model), and the charges and shadow checks into their daily totals (storage.rows.daily), so
that accounting over time survives the sessions.

Deleting is two steps of short write transactions, so that a request waits for one of them at
most: `retire_roots` takes a few sessions out of every lookup at once (their rows move under a
scope no session has; a client that comes back starts afresh), then `purge_step` deletes what
they own a bounded number of rows at a time, however large a session grew. The rows are locked
while their lineage is judged idle (PostgreSQL; SQLite has one writer anyway), so a request
touching a session meanwhile keeps it whole. A sweep cut short (a crash, a shutdown) leaves
retired rows that the next one purges.

SQLite puts freed pages on a free list that new writes reuse; `give_back` returns some to the
file system with incremental vacuum, which a file only does once `auto_vacuum` is INCREMENTAL:
set before its first table, or by one VACUUM (`make_incremental`). Deletes also leave marks in
the full-text index's segments until they are merged (`merge_index`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Executable,
    and_,
    bindparam,
    func,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import Database, insert_for, upsert
from storage.database.tables import (
    archived_messages,
    checkpoints,
    events,
    leases,
    retention_turns,
    sessions,
    usage,
    usage_daily,
)
from storage.rows import daily, search
from storage.rows.charges import charges, shadow_checks

logger = logging.getLogger("ctxgate.storage")

# (scope, root_key): one client session id with all its lineages
Root = tuple[str, str]
# The scope prefix of retired rows, waiting to be purged. A session's scope is "anon" or hex.
RETIRED = "ctxgate:retired:"


def _retired(dialect: str) -> ColumnElement[bool]:
    """Rows under the RETIRED scope. On SQLite (binary collation) a range the scope's index
    can walk, which LIKE cannot; PostgreSQL's collation may order punctuation otherwise, and a
    scan there holds no lock that requests wait for."""
    scope = sessions.c.scope
    if dialect == "sqlite":
        return and_(scope >= RETIRED, scope < RETIRED[:-1] + ";")
    return scope.startswith(RETIRED, autoescape=True)


_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
_TOTALS = ("requests", "prompt_tokens", "completion_tokens")


@dataclass(frozen=True, slots=True)
class Batch:
    """What one batch deleted."""

    sessions: int  # client session ids, each with all its lineages
    rows: int  # session rows (a session's own, its rotations and forks)
    usage_rows: int  # usage rows added into the daily totals first


async def idle_roots(conn: AsyncConnection, cutoff: float, limit: int) -> list[Root]:
    """Up to `limit` sessions whose rows were all last updated before `cutoff`, idlest first."""
    c = sessions.c
    newest = func.max(c.updated_at)
    stmt = (
        select(c.scope, c.root_key)
        .where(c.root_key.is_not(None), ~_retired(conn.dialect.name))
        .group_by(c.scope, c.root_key)
        .having(newest < cutoff)
        .order_by(newest)
        .limit(limit)
    )
    return [(str(row.scope), str(row.root_key)) for row in await conn.execute(stmt)]


async def retire_roots(
    conn: AsyncConnection, roots: Sequence[Root], cutoff: float, keep_usage: bool
) -> Batch:
    """Retire the sessions of `roots` still idle since before `cutoff`: their usage added into
    the daily totals, their leases deleted, their rows moved out of every lookup (under the
    RETIRED scope) for `purge_step` to delete with what they own."""
    if not roots:
        return Batch(0, 0, 0)
    c = sessions.c
    of_roots = or_(*(and_(c.scope == scope, c.root_key == root) for scope, root in roots))
    stmt = select(c.id, c.scope, c.key, c.root_key, c.model, c.updated_at).where(of_roots)
    rows = (await conn.execute(stmt.with_for_update())).all()
    touched = {(r.scope, r.root_key) for r in rows if r.updated_at >= cutoff}
    doomed = [r for r in rows if (r.scope, r.root_key) not in touched]
    if not doomed:
        return Batch(0, 0, 0)
    ids = [int(r.id) for r in doomed]
    owners = {int(r.id): (str(r.scope), str(r.model)) for r in doomed}
    folded = await fold_usage(conn, owners) if keep_usage else 0
    keys = [(str(r.scope), str(r.key)) for r in doomed]
    # Keyed by (scope, key) rather than hung off the rows: deleted now, or a client that
    # reuses the id would find them.
    await daily.forget(conn, keys, keep_usage)
    await conn.execute(leases.delete().where(tuple_(leases.c.scope, leases.c.key).in_(keys)))
    # (RETIRED + scope, key) stays unique: (scope, key) was.
    await conn.execute(
        sessions.update().where(c.id.in_(ids)).values(scope=literal(RETIRED) + c.scope)
    )
    return Batch(len({(r.scope, r.root_key) for r in doomed}), len(ids), folded)


async def orphan_keys(conn: AsyncConnection, cutoff: float, limit: int) -> list[Root]:
    """Up to `limit` (scope, key) with charges or shadow checks but no session row, the newest
    of them from before `cutoff` (a request that never made a row, say)."""
    found: set[Root] = set()
    for table in (charges, shadow_checks):
        c = table.c
        has_row = select(sessions.c.id).where(sessions.c.scope == c.scope, sessions.c.key == c.key)
        stmt = (
            select(c.scope, c.key)
            .where(~has_row.exists())
            .group_by(c.scope, c.key)
            .having(func.max(c.at) < cutoff)
            .limit(limit)
        )
        found |= {(str(r.scope), str(r.key)) for r in await conn.execute(stmt)}
    return sorted(found)[:limit]


async def purge_step(conn: AsyncConnection, limit: int) -> int:
    """Delete up to `limit` rows that retired sessions own (their archive first: its search
    index goes with it), or once they own none, the retired rows; how many went (0: none
    left)."""
    c = sessions.c
    retired = select(c.id).where(_retired(conn.dialect.name))
    for table in (archived_messages, events, usage, checkpoints):
        chunk = select(table.c.id).where(table.c.session_id.in_(retired)).limit(limit)
        result = await conn.execute(table.delete().where(table.c.id.in_(chunk)))
        if result.rowcount:
            return int(result.rowcount)
    result = await conn.execute(sessions.delete().where(_retired(conn.dialect.name)))
    return int(result.rowcount or 0)


async def fold_usage(conn: AsyncConnection, owners: dict[int, tuple[str, str]]) -> int:
    """Add the sessions' usage rows into `usage_daily`; how many rows were added."""
    u = usage.c
    stmt = select(u.session_id, u.at, u.prompt_tokens, u.completion_tokens).where(
        u.session_id.in_(list(owners))
    )
    found = (await conn.execute(stmt)).all()
    totals = daily_totals(
        (owners[int(r.session_id)], r.at, r.prompt_tokens, r.completion_tokens) for r in found
    )
    if totals:
        await conn.execute(_totals_upsert(conn.dialect.name), totals)
    return len(found)


def daily_totals(
    rows: Iterable[tuple[tuple[str, str], float, int, int]],
) -> list[dict[str, Any]]:
    """((scope, model), at, prompt, completion) rows summed per UTC day, scope and model."""
    sums: dict[tuple[str, str, str], list[int]] = {}
    for (scope, model), at, prompt, completion in rows:
        day = dt.datetime.fromtimestamp(at, dt.UTC).date().isoformat()
        total = sums.setdefault((day, scope, model), [0, 0, 0])
        total[0] += 1
        total[1] += int(prompt)
        total[2] += int(completion)
    return [
        {"day": day, "scope": scope, "model": model, **dict(zip(_TOTALS, values, strict=True))}
        for (day, scope, model), values in sorted(sums.items())
    ]


def _totals_upsert(dialect: str) -> Executable:
    names = ("day", "scope", "model", *_TOTALS)
    stmt = insert_for(dialect, usage_daily).values({n: bindparam(n) for n in names})
    old, new = usage_daily.c, stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[old.day, old.scope, old.model],
        set_={n: old[n] + new[n] for n in _TOTALS},
    )


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """The usage of deleted sessions on one UTC day, of one scope and model."""

    day: str
    scope: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int


async def daily_usage(conn: AsyncConnection, since: str | None = None) -> list[DailyUsage]:
    """The kept totals by day (then scope, model), from the day `since` ("YYYY-MM-DD") on."""
    d = usage_daily.c
    stmt = select(usage_daily).order_by(d.day, d.scope, d.model)
    if since is not None:
        stmt = stmt.where(d.day >= since)
    return [DailyUsage(**row) for row in (await conn.execute(stmt)).mappings()]


# -- whose turn ----------------------------------------------------------------------------

_TURN = "sweep"


async def take_turn(conn: AsyncConnection, owner: str, ttl_s: float, now: float) -> bool:
    """Take the turn to sweep for `ttl_s` when the last one has run out (even if it was ours:
    the turn is also the pause between sweeps)."""
    t = retention_turns.c
    stmt = upsert(conn, retention_turns).values(name=_TURN, owner=owner, expires_at=now + ttl_s)
    stmt = stmt.on_conflict_do_update(
        index_elements=[t.name],
        set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at},
        where=t.expires_at <= now,
    )
    return (await conn.execute(stmt.returning(t.owner))).first() is not None


async def extend_turn(conn: AsyncConnection, owner: str, ttl_s: float, now: float) -> bool:
    """Extend our turn over a long sweep; False once another has taken it."""
    t = retention_turns.c
    stmt = (
        retention_turns.update()
        .where(t.name == _TURN, t.owner == owner)
        .values(expires_at=now + ttl_s)
    )
    return bool((await conn.execute(stmt)).rowcount)


async def turn_holder(conn: AsyncConnection) -> str | None:
    t = retention_turns.c
    return (await conn.execute(select(t.owner).where(t.name == _TURN))).scalar_one_or_none()


# -- SQLite's space ------------------------------------------------------------------------


async def _pragma(db: Database, pragma: str) -> int:
    async def read(conn: AsyncConnection) -> int:
        return int((await conn.exec_driver_sql(f"PRAGMA {pragma}")).scalar() or 0)

    return await db.read(read)


async def make_incremental(db: Database) -> float | None:
    """Switch a SQLite file to incremental auto-vacuum (one VACUUM, which rewrites the file
    and holds its write lock meanwhile); the seconds it took, or None when nothing was to do.
    """
    if db.dialect != "sqlite" or await _pragma(db, "auto_vacuum") == _INCREMENTAL:
        return None

    async def vacuum(conn: AsyncConnection) -> None:
        # Outside any transaction: the reader emits no BEGIN.
        await conn.exec_driver_sql("PRAGMA auto_vacuum=INCREMENTAL")
        await conn.exec_driver_sql("VACUUM")

    started = time.perf_counter()
    await db.read(vacuum)
    took = time.perf_counter() - started
    logger.info("SQLite file switched to incremental auto-vacuum in %.2f s", took)
    return took


async def merge_index(conn: AsyncConnection, pages: int) -> bool:
    """Merge some of SQLite's full-text index segments (writing up to `pages` pages), which
    drops what deleted rows left in them; whether there was anything to merge. PostgreSQL's
    GIN index needs no such step."""
    if conn.dialect.name != "sqlite":
        return False
    before = (await conn.exec_driver_sql("SELECT total_changes()")).scalar_one()
    await conn.exec_driver_sql(
        f"INSERT INTO {search.TABLE} ({search.TABLE}, rank) VALUES ('merge', {int(pages)})"
    )
    after = (await conn.exec_driver_sql("SELECT total_changes()")).scalar_one()
    return int(after) - int(before) >= 2  # FTS5's own test: fewer means nothing was merged


async def vacuumable(db: Database) -> bool:
    """Whether freed pages can be given back (SQLite in incremental auto-vacuum; PostgreSQL's
    autovacuum keeps them for reuse instead)."""
    return db.dialect == "sqlite" and await _pragma(db, "auto_vacuum") == _INCREMENTAL


async def give_back(db: Database, pages: int) -> int:
    """Return up to `pages` of SQLite's free pages to the file system, in one transaction of
    its own; how many were returned."""

    async def step(conn: AsyncConnection) -> int:
        before = int((await conn.exec_driver_sql("PRAGMA freelist_count")).scalar() or 0)
        # Each step of the pragma moves one page, and a driver's execute takes one step:
        # executescript runs it to its end, as its own transaction (the reader emits no BEGIN).
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        await driver.executescript(f"PRAGMA incremental_vacuum({pages})")
        after = int((await conn.exec_driver_sql("PRAGMA freelist_count")).scalar() or 0)
        return before - after

    return await db.read(step)
