"""Usage rows: per-session counters and the per-request points of the dashboard chart."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Executable, and_, bindparam, case, desc, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import insert_for
from storage.database.inline import Executor
from storage.database.tables import sessions, usage
from storage.records import SessionKey, UsagePoint, UsageRecord
from storage.rows.sessions import new_row

_LAST_FIELDS = (
    "last_prompt_tokens",
    "last_completion_tokens",
    "last_message_count",
    "last_usage_estimated",
    "last_usage_at",
)
_TOTALS = ("request_count", "total_prompt_tokens", "total_completion_tokens")
_TIP = ("tip_len", "tip_digest")
_INSERTED = (*new_row(SessionKey("", ""), "", 0.0), *_LAST_FIELDS, *_TOTALS, *_TIP)
_USAGE_FIELDS = ("at", "prompt_tokens", "completion_tokens", "message_count", "estimated")


async def apply(conn: Executor, records: Sequence[UsageRecord], now: float) -> None:
    """Bump counters (one upsert per session) and append one usage row per record.

    Two statements whatever the batch holds, each run once over all its rows: through
    aiosqlite every statement is several hops to its thread, and a batch of 16 sessions cost
    about 90 of them as one upsert per session.
    Every record must carry `at` (the store stamps it on the way in).
    """
    groups = _by_session(records)
    if not groups:
        return
    counters = [_counters(sk, group, now) for sk, group in groups.items()]
    rows = [_usage_row(sk, u) for sk, group in groups.items() for u in group]
    await conn.execute(_counters_upsert(conn.dialect.name), counters)
    await conn.execute(_usage_insert(), rows)


async def points(conn: AsyncConnection, session_id: int, limit: int) -> list[UsagePoint]:
    """The newest `limit` usage points, oldest first."""
    stmt = (
        select(usage.c.at, usage.c.prompt_tokens, usage.c.completion_tokens, usage.c.estimated)
        .where(usage.c.session_id == session_id)
        .order_by(desc(usage.c.at), desc(usage.c.id))
        .limit(limit)
    )
    rows = (await conn.execute(stmt)).all()
    return [
        UsagePoint(r.at, r.prompt_tokens, r.completion_tokens, bool(r.estimated))
        for r in reversed(rows)
    ]


def _by_session(records: Sequence[UsageRecord]) -> dict[SessionKey, list[UsageRecord]]:
    groups: dict[SessionKey, list[UsageRecord]] = {}
    for record in records:
        groups.setdefault(record.sk, []).append(record)
    return groups


def _counters(sk: SessionKey, group: list[UsageRecord], now: float) -> dict[str, Any]:
    latest = group[0]
    for record in group:  # the newest by `at`; on a tie the one handed in last
        if _at(record) >= _at(latest):
            latest = record
    return new_row(sk, latest.model, now) | {
        "last_prompt_tokens": latest.prompt_tokens,
        "last_completion_tokens": latest.completion_tokens,
        "last_message_count": latest.message_count,
        "last_usage_estimated": latest.estimated,
        "last_usage_at": _at(latest),
        "request_count": len(group),
        "total_prompt_tokens": sum(u.prompt_tokens for u in group),
        "total_completion_tokens": sum(u.completion_tokens for u in group),
        "tip_len": latest.tip_len,
        "tip_digest": latest.tip_digest,
    }


@functools.cache
def _counters_upsert(dialect: str) -> Executable:
    """The counters' upsert, built once per dialect: building it (an `excluded` alias, a
    CASE per field) costs far more than running it."""
    stmt = insert_for(dialect, sessions).values({name: bindparam(name) for name in _INSERTED})
    new, old = stmt.excluded, sessions.c
    # Usage older than what is stored, or than the last compression, only adds to the
    # totals: the write-behind may land after a compression set the pending sentinel.
    is_newer = and_(
        new.last_usage_at >= func.coalesce(old.last_usage_at, new.last_usage_at),
        new.last_usage_at >= func.coalesce(old.last_compression_at, new.last_usage_at),
    )
    set_: dict[str, ColumnElement[Any]] = {
        name: case((is_newer, new[name]), else_=old[name]) for name in _LAST_FIELDS
    }
    # A request that was not digested leaves its lineage's tip where it was.
    has_tip = and_(is_newer, new.tip_digest.is_not(None))
    set_ |= {name: case((has_tip, new[name]), else_=old[name]) for name in _TIP}
    set_ |= {
        "model": new.model,
        "updated_at": new.updated_at,
        "request_count": old.request_count + new.request_count,
        "total_prompt_tokens": old.total_prompt_tokens + new.total_prompt_tokens,
        "total_completion_tokens": old.total_completion_tokens + new.total_completion_tokens,
    }
    return stmt.on_conflict_do_update(index_elements=[old.scope, old.key], set_=set_)


@functools.cache
def _usage_insert() -> Executable:
    """A usage row, its session found by key (the counters' upsert has just made sure of it)."""
    values = [bindparam(name, type_=usage.c[name].type) for name in _USAGE_FIELDS]
    found = select(sessions.c.id, *values).where(
        sessions.c.scope == bindparam("scope"), sessions.c.key == bindparam("key")
    )
    return usage.insert().from_select(["session_id", *_USAGE_FIELDS], found)


def _usage_row(sk: SessionKey, u: UsageRecord) -> dict[str, Any]:
    return {
        "scope": sk.scope,
        "key": sk.key,
        "at": _at(u),
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "message_count": u.message_count,
        "estimated": u.estimated,
    }


def _at(u: UsageRecord) -> float:
    if u.at is None:
        raise ValueError("usage records reach the database stamped with `at`")
    return u.at
