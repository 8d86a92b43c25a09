"""Small builders shared by the storage tests (real values, no doubles of our modules)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import func, make_url, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from storage import CompressionCommit, EventRecord, SessionKey, codec
from storage.database.db import Database
from storage.database.tables import checkpoints, metadata
from storage.rows import sessions as sessions_module

T0 = 1_700_000_000.0
PG_ENV = "CTXGATE_TEST_PG_URL"


async def reset_postgres(url: str) -> None:
    """Empty the PostgreSQL test server's schema (its database is shared by every test)."""
    db = Database.connect(url)
    try:
        await db.write(lambda conn: conn.execute(text("DROP SCHEMA public CASCADE")))
        await db.write(lambda conn: conn.execute(text("CREATE SCHEMA public")))
    finally:
        await db.dispose()


@contextlib.contextmanager
def own_database(url: str, prefix: str) -> Iterator[str]:
    """A fresh database on the PostgreSQL server of `url`, named `prefix` and a random tail,
    for tests whose work reaches every row (a sweep, a shared stack); dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    server = make_url(url)

    async def run(statement: str) -> None:
        engine = create_async_engine(server, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(statement))
        finally:
            await engine.dispose()

    asyncio.run(run(f"CREATE DATABASE {name}"))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


class FakeClock:
    """An injectable clock that only moves when told to."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def chain_digests(messages: Sequence[Any]) -> list[str]:
    """digests[i] covers messages[0..i] (the proxy's chained digest, simplified)."""
    out, h = [], ""
    for m in messages:
        h = hashlib.sha256((h + repr(m)).encode()).hexdigest()
        out.append(h)
    return out


def history(n: int, tag: str = "") -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"{tag}message {i}"} for i in range(n)]


def event(sk: SessionKey, **overrides: Any) -> EventRecord:
    fields: dict[str, Any] = {
        "sk": sk,
        "trigger": "agent",
        "outcome": "ok",
        "tokens_before": 1000,
        "tokens_after": 200,
        "messages_before": 40,
        "messages_after": 6,
        "duration_ms": 12.5,
    }
    return EventRecord(**(fields | overrides))


def commit(
    sk: SessionKey,
    digests: Sequence[str],
    prefix_len: int,
    *,
    replacement: list[dict[str, Any]] | None = None,
    archived: Sequence[tuple[int, dict[str, Any]]] = (),
    state: dict[str, Any] | None = None,
    rotate_to: str | None = None,
    sources: Sequence[int | None] | None = None,
    **event_overrides: Any,
) -> CompressionCommit:
    return CompressionCommit(
        sk=sk,
        model="gpt-test",
        prefix_len=prefix_len,
        prefix_digest=digests[prefix_len - 1],
        messages=replacement or [{"role": "user", "content": f"summary of {prefix_len}"}],
        summary=f"summary of {prefix_len}",
        tokens_before=1000,
        tokens_after=200,
        archived=archived,
        event=event(sk, **event_overrides),
        engine_state=state or {"pass": prefix_len},
        rotate_to=rotate_to,
        sources=sources,
    )


async def row_counts(url: str) -> dict[str, int]:
    """Rows per table, read through a separate engine."""
    db = Database.connect(url)
    try:

        async def count(conn: AsyncConnection) -> dict[str, int]:
            return {
                name: (await conn.execute(select(func.count()).select_from(table))).scalar_one()
                for name, table in metadata.tables.items()
            }

        return await db.read(count)
    finally:
        await db.dispose()


async def insert_checkpoints(
    url: str, sk: SessionKey, digests: Sequence[str], lengths: Sequence[int]
) -> None:
    """Bulk-load checkpoints in one transaction (commit_compression costs ms apiece)."""
    db = Database.connect(url)
    try:

        async def insert(conn: AsyncConnection) -> None:
            session_id = await sessions_module.ensure(conn, sk, "gpt-test", T0)
            rows = [
                {
                    "session_id": session_id,
                    "prefix_len": length,
                    "prefix_digest": digests[length - 1],
                    "messages": codec.dumps([{"role": "user", "content": f"summary {length}"}]),
                    "message_count": 1,
                    "tokens_before": 1000,
                    "tokens_after": 100,
                    "summary": None,
                    "created_at": T0,
                }
                for length in lengths
            ]
            await conn.execute(checkpoints.insert(), rows)

        await db.write(insert)
    finally:
        await db.dispose()
