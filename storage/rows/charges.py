"""Charges and shadow checks: the rows behind savings in money and shadow agreement.

A charge is one upstream call's tokens by billing tier (a client request, a summary call, a
recall round, a shadow call); a client request's row also holds what its uncompressed history
would have been billed. Rows are keyed by (scope, key) like leases, not hung off a session
row: the money was spent even when the session is deleted later, and the totals keep it.
Sums come back grouped, so that prices (which live in the config and may change) are applied
on reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Double,
    Index,
    Integer,
    String,
    Table,
    and_,
    case,
    desc,
    false,
    func,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.inline import Executor
from storage.database.tables import metadata
from storage.records import SessionKey

charges = Table(
    "charges",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String, nullable=False),
    Column("key", String, nullable=False),
    Column("at", Double, nullable=False),
    Column("model", String, nullable=False),
    Column("kind", String, nullable=False),  # request, summary, recall, shadow
    Column("compressed", Boolean, nullable=False),  # the view forwarded was not the client's
    Column("uncached", BigInteger, nullable=False),
    Column("cache_read", BigInteger, nullable=False),
    Column("cache_write", BigInteger, nullable=False),
    Column("output", BigInteger, nullable=False),
    Column("full_uncached", BigInteger, nullable=False),
    Column("full_cache_read", BigInteger, nullable=False),
    Column("full_cache_write", BigInteger, nullable=False),
    Column("full_prompt", BigInteger, nullable=False),  # the uncompressed history's prompt
    Index("ix_charges_scope_key_at", "scope", "key", "at"),
)

shadow_checks = Table(
    "shadow_checks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String, nullable=False),
    Column("key", String, nullable=False),
    Column("at", Double, nullable=False),
    Column("model", String, nullable=False),
    Column("trigger", String, nullable=False),
    Column("agrees", Boolean, nullable=False),  # B (compressed) took A's action
    Column("noise_agrees", Boolean, nullable=False),  # A' (uncompressed again) took A's
    Column("tokens", BigInteger, nullable=False),  # billed to the shadow calls
    Index("ix_shadow_checks_scope_key", "scope", "key"),
)


@dataclass(frozen=True, slots=True)
class ChargeRow:
    sk: SessionKey
    at: float
    model: str
    kind: str
    compressed: bool
    uncached: int
    cache_read: int
    cache_write: int
    output: int
    full_uncached: int = 0
    full_cache_read: int = 0
    full_cache_write: int = 0
    full_prompt: int = 0


@dataclass(frozen=True, slots=True)
class ChargeGroup:
    """The sums of a group of charges (one session or all, one model, kind and compressed)."""

    scope: str | None  # None when summed over sessions
    key: str | None
    model: str
    kind: str
    compressed: bool
    calls: int
    uncached: int
    cache_read: int
    cache_write: int
    output: int
    full_uncached: int
    full_cache_read: int
    full_cache_write: int


@dataclass(frozen=True, slots=True)
class ShadowRow:
    sk: SessionKey
    at: float
    model: str
    trigger: str
    agrees: bool
    noise_agrees: bool
    tokens: int


@dataclass(frozen=True, slots=True)
class ShadowGroup:
    model: str
    trigger: str
    samples: int
    agreements: int
    noise_agreements: int
    tokens: int


# The columns each row type writes besides its session key.
_FIELDS = {
    kind: tuple(f.name for f in fields(kind) if f.name != "sk") for kind in (ChargeRow, ShadowRow)
}

_SUMMED = (
    "uncached",
    "cache_read",
    "cache_write",
    "output",
    "full_uncached",
    "full_cache_read",
    "full_cache_write",
)


def create(conn: Connection) -> None:
    """The tables, on a database made before they existed."""
    charges.create(conn, checkfirst=True)
    shadow_checks.create(conn, checkfirst=True)


# Built once: the write-behind runs them with every batch, and a statement built once runs
# on SQLite without SQLAlchemy's per-row work (storage.database.inline).
_ADD_CHARGES = charges.insert()
_ADD_SHADOW = shadow_checks.insert()


async def add_charges(conn: Executor, rows: Sequence[ChargeRow]) -> None:
    if rows:
        await conn.execute(_ADD_CHARGES, [_row(r) for r in rows])


async def add_shadow(conn: Executor, row: ShadowRow) -> None:
    await conn.execute(_ADD_SHADOW, [_row(row)])


def _row(record: ChargeRow | ShadowRow) -> dict[str, object]:
    """The record as its table's columns. Its fields are flat values: `asdict`'s recursive
    copy of each cost more than the insert itself, per row of every request."""
    sk = record.sk
    data: dict[str, object] = {name: getattr(record, name) for name in _FIELDS[type(record)]}
    data["scope"] = sk.scope
    data["key"] = sk.key
    return data


async def last_full_prompt(conn: AsyncConnection, sk: SessionKey) -> tuple[int, float] | None:
    """The session's newest client request: its uncompressed prompt and when it was sent."""
    stmt = (
        select(charges.c.full_prompt, charges.c.at)
        .where(charges.c.scope == sk.scope, charges.c.key == sk.key, charges.c.kind == "request")
        .order_by(desc(charges.c.at), desc(charges.c.id))
        .limit(1)
    )
    row = (await conn.execute(stmt)).first()
    return None if row is None else (int(row.full_prompt), float(row.at))


async def charge_groups(
    conn: AsyncConnection, keys: Sequence[SessionKey] | None = None, per_session: bool = False
) -> list[ChargeGroup]:
    """Charges summed by model, kind and compressed (and by session when `per_session`);
    `keys` limits them to those sessions (None: all)."""
    by = [charges.c.model, charges.c.kind, charges.c.compressed]
    if per_session:
        by = [charges.c.scope, charges.c.key, *by]
    stmt = select(
        *by, func.count().label("calls"), *(func.sum(charges.c[n]).label(n) for n in _SUMMED)
    ).group_by(*by)
    if keys is not None:
        wanted = [and_(charges.c.scope == k.scope, charges.c.key == k.key) for k in keys]
        stmt = stmt.where(or_(*wanted) if wanted else false())
    rows = (await conn.execute(stmt)).all()
    return [
        ChargeGroup(
            scope=r.scope if per_session else None,
            key=r.key if per_session else None,
            model=r.model,
            kind=r.kind,
            compressed=bool(r.compressed),
            calls=int(r.calls),
            **{n: int(getattr(r, n) or 0) for n in _SUMMED},
        )
        for r in rows
    ]


async def shadow_groups(conn: AsyncConnection, sk: SessionKey | None = None) -> list[ShadowGroup]:
    """Shadow checks summed by model and trigger (of one session, or all)."""
    c = shadow_checks.c
    stmt = select(
        c.model,
        c.trigger,
        func.count().label("samples"),
        func.sum(case((c.agrees, 1), else_=0)).label("agreements"),
        func.sum(case((c.noise_agrees, 1), else_=0)).label("noise"),
        func.sum(c.tokens).label("tokens"),
    ).group_by(c.model, c.trigger)
    if sk is not None:
        stmt = stmt.where(c.scope == sk.scope, c.key == sk.key)
    return [
        ShadowGroup(
            r.model,
            r.trigger,
            int(r.samples),
            int(r.agreements or 0),
            int(r.noise or 0),
            int(r.tokens or 0),
        )
        for r in (await conn.execute(stmt)).all()
    ]


async def charges_of(conn: AsyncConnection, sk: SessionKey, limit: int) -> list[ChargeRow]:
    """The session's newest `limit` charges, oldest first."""
    c = charges.c
    stmt = (
        select(charges)
        .where(c.scope == sk.scope, c.key == sk.key)
        .order_by(desc(c.at), desc(c.id))
        .limit(limit)
    )
    rows = (await conn.execute(stmt)).all()
    return [
        ChargeRow(
            sk,
            r.at,
            r.model,
            r.kind,
            bool(r.compressed),
            r.uncached,
            r.cache_read,
            r.cache_write,
            r.output,
            r.full_uncached,
            r.full_cache_read,
            r.full_cache_write,
            r.full_prompt,
        )  # fmt: skip
        for r in reversed(rows)
    ]
