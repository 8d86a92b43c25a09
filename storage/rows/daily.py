"""The ledger's daily totals: what deleted sessions were charged and how their shadow checks
went, summed per UTC day and scope, so that deleting a session (retention, the admin API)
removes every row it had and the totals over time stay what they were.

`forget` adds a set of sessions' charges and shadow checks into `charges_daily` and
`shadow_daily` (unless told not to keep totals) and deletes them; `charge_totals` and
`shadow_totals` give the kept sums in the shapes storage.rows.charges reports, for the
overall figures to add them in.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Executable,
    String,
    Table,
    bindparam,
    func,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import insert_for
from storage.database.tables import metadata
from storage.rows.charges import ChargeGroup, ShadowGroup, charges, shadow_checks
from storage.rows.switches import session_switches

Key = tuple[str, str]  # (scope, key) of one session row
_KEYS_PER_STATEMENT = 400  # bound parameters stay well under SQLite's limit

_CHARGE_SUMS = (
    "uncached",
    "cache_read",
    "cache_write",
    "output",
    "full_uncached",
    "full_cache_read",
    "full_cache_write",
)
_SHADOW_SUMS = ("samples", "agreements", "noise_agreements", "tokens")

charges_daily = Table(
    "charges_daily",
    metadata,
    Column("day", String, primary_key=True),  # "YYYY-MM-DD", UTC
    Column("scope", String, primary_key=True),
    Column("model", String, primary_key=True),
    Column("kind", String, primary_key=True),
    Column("compressed", Boolean, primary_key=True),
    Column("calls", BigInteger, nullable=False),
    *(Column(name, BigInteger, nullable=False) for name in _CHARGE_SUMS),
)

shadow_daily = Table(
    "shadow_daily",
    metadata,
    Column("day", String, primary_key=True),
    Column("scope", String, primary_key=True),
    Column("model", String, primary_key=True),
    Column("trigger", String, primary_key=True),
    *(Column(name, BigInteger, nullable=False) for name in _SHADOW_SUMS),
)


def create(conn: Connection) -> None:
    """The tables, on a database made before they existed."""
    charges_daily.create(conn, checkfirst=True)
    shadow_daily.create(conn, checkfirst=True)


def day_of(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).date().isoformat()


async def forget(conn: AsyncConnection, keys: Iterable[Key], keep_totals: bool) -> int:
    """Delete the charges, shadow checks and switches of the sessions `keys` (the first two
    added into the daily totals first when `keep_totals`); how many rows went."""
    keys = sorted(set(keys))
    gone = 0
    for start in range(0, len(keys), _KEYS_PER_STATEMENT):
        chunk = keys[start : start + _KEYS_PER_STATEMENT]
        if keep_totals:
            await _fold_charges(conn, chunk)
            await _fold_shadow(conn, chunk)
        for table in (charges, shadow_checks, session_switches):
            of_keys = tuple_(table.c.scope, table.c.key).in_(chunk)
            gone += int((await conn.execute(table.delete().where(of_keys))).rowcount or 0)
    return gone


async def _fold_charges(conn: AsyncConnection, keys: Sequence[Key]) -> None:
    c = charges.c
    stmt = select(c.scope, c.at, c.model, c.kind, c.compressed, *(c[n] for n in _CHARGE_SUMS))
    sums: dict[tuple[str, str, str, str, bool], list[int]] = {}
    for r in await conn.execute(stmt.where(tuple_(c.scope, c.key).in_(keys))):
        group = (day_of(r.at), r.scope, r.model, r.kind, bool(r.compressed))
        total = sums.setdefault(group, [0] * (1 + len(_CHARGE_SUMS)))
        total[0] += 1
        for i, name in enumerate(_CHARGE_SUMS, 1):
            total[i] += int(getattr(r, name))
    rows = [
        dict(zip(("day", "scope", "model", "kind", "compressed"), group, strict=True))
        | dict(zip(("calls", *_CHARGE_SUMS), values, strict=True))
        for group, values in sums.items()
    ]
    if rows:
        await conn.execute(_add(conn.dialect.name, "charges"), rows)


async def _fold_shadow(conn: AsyncConnection, keys: Sequence[Key]) -> None:
    c = shadow_checks.c
    stmt = select(c.scope, c.at, c.model, c.trigger, c.agrees, c.noise_agrees, c.tokens)
    sums: dict[tuple[str, str, str, str], list[int]] = {}
    for r in await conn.execute(stmt.where(tuple_(c.scope, c.key).in_(keys))):
        total = sums.setdefault((day_of(r.at), r.scope, r.model, r.trigger), [0, 0, 0, 0])
        total[0] += 1
        total[1] += int(bool(r.agrees))
        total[2] += int(bool(r.noise_agrees))
        total[3] += int(r.tokens)
    rows = [
        dict(zip(("day", "scope", "model", "trigger"), group, strict=True))
        | dict(zip(_SHADOW_SUMS, values, strict=True))
        for group, values in sums.items()
    ]
    if rows:
        await conn.execute(_add(conn.dialect.name, "shadow"), rows)


@functools.cache
def _add(dialect: str, which: str) -> Executable:
    """Add a row of sums into its day's totals (an upsert that adds)."""
    table, sums = (
        (charges_daily, ("calls", *_CHARGE_SUMS))
        if which == "charges"
        else (shadow_daily, _SHADOW_SUMS)
    )
    stmt = insert_for(dialect, table).values({c.name: bindparam(c.name) for c in table.columns})
    return stmt.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={n: table.c[n] + stmt.excluded[n] for n in sums},
    )


async def charge_totals(conn: AsyncConnection) -> list[ChargeGroup]:
    """The kept charges summed by model, kind and compressed (over every day and scope)."""
    d = charges_daily.c
    by = (d.model, d.kind, d.compressed)
    sums = (func.sum(d[n]).label(n) for n in ("calls", *_CHARGE_SUMS))
    rows = await conn.execute(select(*by, *sums).group_by(*by))
    return [
        ChargeGroup(
            scope=None,
            key=None,
            model=r.model,
            kind=r.kind,
            compressed=bool(r.compressed),
            **{n: int(getattr(r, n) or 0) for n in ("calls", *_CHARGE_SUMS)},
        )
        for r in rows
    ]


async def shadow_totals(conn: AsyncConnection) -> list[ShadowGroup]:
    """The kept shadow checks summed by model and trigger."""
    d = shadow_daily.c
    sums = (func.sum(d[n]).label(n) for n in _SHADOW_SUMS)
    rows = await conn.execute(select(d.model, d.trigger, *sums).group_by(d.model, d.trigger))
    return [
        ShadowGroup(
            r.model,
            r.trigger,
            int(r.samples or 0),
            int(r.agreements or 0),
            int(r.noise_agreements or 0),
            int(r.tokens or 0),
        )
        for r in rows
    ]


def merged_charges(groups: Iterable[ChargeGroup]) -> list[ChargeGroup]:
    """Groups of the same (scope, key, model, kind, compressed) summed into one."""
    out: dict[tuple[Any, ...], ChargeGroup] = {}
    for g in groups:
        key = (g.scope, g.key, g.model, g.kind, g.compressed)
        old = out.get(key)
        out[key] = g if old is None else _sum(old, g, ("calls", *_CHARGE_SUMS))
    return list(out.values())


def merged_shadow(groups: Iterable[ShadowGroup]) -> list[ShadowGroup]:
    out: dict[tuple[str, str], ShadowGroup] = {}
    for g in groups:
        old = out.get((g.model, g.trigger))
        out[g.model, g.trigger] = g if old is None else _sum(old, g, _SHADOW_SUMS)
    return list(out.values())


def _sum(a: Any, b: Any, names: Sequence[str]) -> Any:
    return replace(a, **{n: getattr(a, n) + getattr(b, n) for n in names})
