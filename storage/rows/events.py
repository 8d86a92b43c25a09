"""Compression events: what triggered a compression, what it did, how long it took."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.tables import events
from storage.records import Event, EventRecord


async def insert(
    conn: AsyncConnection, session_id: int, e: EventRecord, checkpoint_id: int | None, now: float
) -> int:
    values = {
        "session_id": session_id,
        "checkpoint_id": checkpoint_id,
        "at": now if e.at is None else e.at,
        "trigger": e.trigger,
        "outcome": e.outcome,
        "tokens_before": e.tokens_before,
        "tokens_after": e.tokens_after,
        "messages_before": e.messages_before,
        "messages_after": e.messages_after,
        "duration_ms": e.duration_ms,
        "error": e.error,
    }
    result = await conn.execute(events.insert().values(values).returning(events.c.id))
    return int(result.scalar_one())


async def for_session(conn: AsyncConnection, session_id: int) -> list[Event]:
    stmt = (
        select(events).where(events.c.session_id == session_id).order_by(events.c.at, events.c.id)
    )
    return [
        Event(
            id=r.id,
            at=r.at,
            trigger=r.trigger,
            outcome=r.outcome,
            tokens_before=r.tokens_before,
            tokens_after=r.tokens_after,
            messages_before=r.messages_before,
            messages_after=r.messages_after,
            duration_ms=r.duration_ms,
            error=r.error,
            checkpoint_id=r.checkpoint_id,
        )
        for r in (await conn.execute(stmt))
    ]


async def trigger_of(conn: AsyncConnection, checkpoint_id: int) -> str | None:
    """The trigger of the compression that made the checkpoint (None: no event names it)."""
    stmt = (
        select(events.c.trigger)
        .where(events.c.checkpoint_id == checkpoint_id)
        .order_by(events.c.id)
        .limit(1)
    )
    found = (await conn.execute(stmt)).scalar_one_or_none()
    return None if found is None else str(found)
