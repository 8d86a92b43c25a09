"""Context windows learned from overflow errors, per model name."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import upsert
from storage.database.tables import model_windows


async def get_all(conn: AsyncConnection) -> dict[str, int]:
    rows = await conn.execute(select(model_windows.c.model, model_windows.c.tokens))
    return {model: int(tokens) for model, tokens in rows}


async def set_window(conn: AsyncConnection, model: str, tokens: int, now: float) -> None:
    stmt = upsert(conn, model_windows).values(model=model, tokens=tokens, updated_at=now)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[model_windows.c.model],
            set_={"tokens": stmt.excluded.tokens, "updated_at": stmt.excluded.updated_at},
        )
    )
