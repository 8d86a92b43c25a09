"""Checkpoints (a client prefix replaced by a compressed list) and the archive of originals."""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import orjson
from sqlalchemy import Row, Select, String, any_, bindparam, desc, func, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import codec
from storage.database.inline import Executor
from storage.database.tables import archived_messages, checkpoints
from storage.database.tables import sessions as sessions_t
from storage.records import (
    PROMPT_TOKENS_PENDING,
    ArchivedMessage,
    ArchiveFacts,
    Checkpoint,
    CheckpointInfo,
    CompressionCommit,
    Message,
    SessionKey,
)
from storage.rows import events, lineages, search, sessions

# Candidate digests sent in the first lookup: the newest checkpoint is nearly always
# within the last few hundred messages, and 500 stays far below every parameter limit.
RECENT_CANDIDATES = 500
ARCHIVE_BATCH = 1000  # archived rows one statement inserts


async def find(
    conn: Executor,
    root: SessionKey,
    prefix_digests: Sequence[str],
    kept: KeptCheckpoints | None = None,
) -> Checkpoint | None:
    """The newest checkpoint whose prefix matches: highest prefix_len, then highest id.

    Searched among every row of the client's session id `root` (its lineages and rotations):
    a matching digest means the same client prefix whichever conversation wrote it. The
    checkpoint names the row that holds it.

    prefix_digests[i] is the digest of the client's messages[0..i], so a checkpoint of
    length L matches when prefix_digests[L - 1] equals its digest.

    First one indexed query with the last RECENT_CANDIDATES digests, returning the row less
    its messages (read once per checkpoint, then found in `kept`): the common case. Failing
    that, the session's checkpoints no longer than the history are walked from the longest
    down, comparing digests here; only (id, prefix_len, digest) travel, so its cost grows
    with the session's checkpoint count, not with the history.
    """
    n = len(prefix_digests)
    lo = max(0, n - RECENT_CANDIDATES)
    candidates = sorted(set(prefix_digests[lo:n]))
    dialect = conn.dialect.name
    params = {
        "scope": root.scope,
        "root": root.key,
        # PostgreSQL takes the list as one array; SQLite as one JSON text (json_each). Hex
        # digests need no escaping, so orjson writes what json would, several times faster.
        "candidates": candidates if dialect == "postgresql" else orjson.dumps(candidates).decode(),
        "lo": lo,
        "hi": n,
    }
    row = (await conn.execute(_recent(dialect), params)).first()
    if row is not None and prefix_digests[row.prefix_len - 1] == row.prefix_digest:
        return await _whole(conn, row, root.scope, kept)
    # Also covers a digest found at another position (digests that are not chained).
    older = (
        select(checkpoints.c.id, checkpoints.c.prefix_len, checkpoints.c.prefix_digest)
        .join(sessions_t, sessions_t.c.id == checkpoints.c.session_id)
        .where(sessions_t.c.scope == root.scope, sessions_t.c.root_key == root.key)
        .where(checkpoints.c.prefix_len <= n)
        .order_by(desc(checkpoints.c.prefix_len), desc(checkpoints.c.id))
    )
    for candidate in await conn.execute(older):
        if prefix_digests[candidate.prefix_len - 1] == candidate.prefix_digest:
            full = await conn.execute(
                select(*_LIGHT, sessions_t.c.key.label("session_key"))
                .join(sessions_t, sessions_t.c.id == checkpoints.c.session_id)
                .where(checkpoints.c.id == candidate.id)
            )
            return await _whole(conn, full.one(), root.scope, kept)
    return None


class KeptCheckpoints:
    """Checkpoints read before, by id, within a budget of their messages' stored bytes.

    A compressed session's every request finds the same checkpoint again; reading its
    messages (the compressed view: hundreds of KB at a 1M window) and parsing them each time
    cost more than the rest of the lookup. Checkpoints are immutable once written; an id
    SQLite gives again after a deletion is told apart by its digest, time and row.
    """

    def __init__(self, budget_bytes: int = 32 * 1024 * 1024) -> None:
        self.budget = budget_bytes
        self._kept: OrderedDict[int, tuple[Checkpoint, int]] = OrderedDict()
        self._bytes = 0

    def get(self, row: Row[Any]) -> Checkpoint | None:
        kept = self._kept.get(row.id)
        if kept is None:
            return None
        checkpoint = kept[0]
        same = (checkpoint.prefix_digest, checkpoint.created_at, checkpoint.key)
        if same != (row.prefix_digest, row.created_at, row.session_key):
            return None
        self._kept.move_to_end(row.id)
        return checkpoint

    def clear(self) -> None:
        """Let every checkpoint go (a deleted session's view is not kept in memory either)."""
        self._kept.clear()
        self._bytes = 0

    def put(self, checkpoint: Checkpoint, size: int) -> None:
        old = self._kept.pop(checkpoint.id, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self.budget:
            return
        self._kept[checkpoint.id] = (checkpoint, size)
        self._bytes += size
        while self._bytes > self.budget:
            self._bytes -= self._kept.popitem(last=False)[1][1]


async def _whole(
    conn: Executor, row: Row[Any], scope: str, kept: KeptCheckpoints | None
) -> Checkpoint:
    """The checkpoint of a row read without its messages: from `kept`, else read now."""
    found = kept.get(row) if kept is not None else None
    if found is not None:
        return found
    heavy = (
        await conn.execute(
            select(checkpoints.c.messages, checkpoints.c.sources).where(checkpoints.c.id == row.id)
        )
    ).one()
    checkpoint = _checkpoint(row, scope, heavy.messages, heavy.sources)
    if kept is not None:
        kept.put(checkpoint, len(heavy.messages))
    return checkpoint


# The checkpoint's columns less the heavy ones (read once per checkpoint: `KeptCheckpoints`).
_LIGHT = [c for c in checkpoints.c if c.name not in ("messages", "sources")]


@functools.cache
def _recent(dialect: str) -> Select[Any]:
    """The first lookup, built once per dialect: the candidates travel as one parameter.

    A 500-item IN list built per call cost SQLAlchemy a millisecond of coercing and
    rendering, and PostgreSQL three times the query itself.
    """
    if dialect == "postgresql":
        array = bindparam("candidates", type_=postgresql.ARRAY(String))
        matches = checkpoints.c.prefix_digest == any_(array)
    else:
        listed = func.json_each(bindparam("candidates", type_=String)).table_valued("value")
        matches = checkpoints.c.prefix_digest.in_(select(listed.c.value))
    return (
        select(*_LIGHT, sessions_t.c.key.label("session_key"))
        .join(sessions_t, sessions_t.c.id == checkpoints.c.session_id)
        .where(sessions_t.c.scope == bindparam("scope"), sessions_t.c.root_key == bindparam("root"))
        .where(matches)
        .where(checkpoints.c.prefix_len > bindparam("lo"))
        .where(checkpoints.c.prefix_len <= bindparam("hi"))
        .order_by(desc(checkpoints.c.prefix_len), desc(checkpoints.c.id))
        .limit(1)
    )


def _checkpoint(row: Row[Any], scope: str, messages: str, sources: str | None) -> Checkpoint:
    return Checkpoint(
        id=row.id,
        scope=scope,
        key=row.session_key,
        prefix_len=row.prefix_len,
        prefix_digest=row.prefix_digest,
        messages=codec.loads(messages),
        tokens_before=row.tokens_before,
        tokens_after=row.tokens_after,
        summary=row.summary,
        created_at=row.created_at,
        sources=_sources(sources),
    )


def _sources(text: str | None) -> tuple[int | None, ...] | None:
    return None if text is None else tuple(codec.loads(text))


async def commit(conn: AsyncConnection, c: CompressionCommit, now: float) -> Checkpoint:
    """Write one compression (checkpoint, archive, event, session) in `conn`'s transaction."""
    parent_id = await sessions.ensure(conn, c.sk, c.model, now)
    target, session_id = c.sk, parent_id
    if c.rotate_to is not None:
        target = SessionKey(c.sk.scope, c.rotate_to)
        session_id = await sessions.create_child(conn, c.sk, c.rotate_to, c.model, now)
    messages = list(c.messages)
    values = {
        "session_id": session_id,
        "prefix_len": c.prefix_len,
        "prefix_digest": c.prefix_digest,
        "messages": codec.dumps(messages),
        "message_count": len(messages),
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "summary": c.summary,
        "created_at": now,
        "sources": None if c.sources is None else codec.dumps(list(c.sources)),
    }
    inserted = await conn.execute(checkpoints.insert().values(values).returning(checkpoints.c.id))
    checkpoint_id = int(inserted.scalar_one())
    await _archive(conn, session_id, checkpoint_id, c.archived, now)
    await events.insert(conn, session_id, c.event, checkpoint_id, now)
    await conn.execute(
        update(sessions_t)
        .where(sessions_t.c.id == session_id)
        .values(
            engine_state=codec.dumps(c.engine_state),
            # The lineage's tip moves to the prefix compressed (it extends the one before).
            tip_len=c.prefix_len,
            tip_digest=c.prefix_digest,
            compression_count=sessions_t.c.compression_count + 1,
            last_prompt_tokens=PROMPT_TOKENS_PENDING,
            last_compression_at=now,
            updated_at=now,
        )
    )
    return Checkpoint(
        id=checkpoint_id,
        scope=target.scope,
        key=target.key,
        prefix_len=c.prefix_len,
        prefix_digest=c.prefix_digest,
        messages=messages,
        tokens_before=c.tokens_before,
        tokens_after=c.tokens_after,
        summary=c.summary,
        created_at=now,
        sources=None if c.sources is None else tuple(c.sources),
    )


async def _archive(
    conn: AsyncConnection,
    session_id: int,
    checkpoint_id: int,
    archived: Sequence[tuple[int, Message]],
    now: float,
) -> None:
    if not archived:
        return
    dialect = conn.dialect.name
    # Only the rows inserted now come back: a copy archived before is indexed already.
    # In batches, each serialised just before it is written: between them the event loop
    # serves other requests (one statement of 100,000 rows held it for seconds, serialising
    # 9,000 rows at once for 100 ms). The search terms of each batch's new rows are read
    # elsewhere while the next batches are written, and indexed after the last.
    reading: list[asyncio.Future[list[search.IndexRow]]] = []
    try:
        for start in range(0, len(archived), ARCHIVE_BATCH):
            new = await _archive_batch(
                conn, session_id, checkpoint_id, archived[start : start + ARCHIVE_BATCH], now
            )
            if new:
                reading.append(search.read_index_rows(dialect, new))
        for future in reading:
            await search.write_index(conn, await future)
    finally:
        _drop(reading)


async def _archive_batch(
    conn: AsyncConnection,
    session_id: int,
    checkpoint_id: int,
    batch: Sequence[tuple[int, Message]],
    now: float,
) -> list[tuple[int, Message]]:
    """Insert one batch of originals; the (row id, message) of those not archived before."""
    originals: dict[tuple[int, str], Message] = {}
    values: list[Any] = []
    for position, message in batch:
        # Sorted keys: the same message re-serialised by an SDK must dedupe.
        text = codec.dumps(message, sort_keys=True)
        digest = codec.digest(text)
        originals[(position, digest)] = message
        values += (session_id, checkpoint_id, position, digest, text, now)
    sql = archive_insert(conn.dialect.name, len(values) // len(ARCHIVE_COLUMNS))
    inserted = await conn.exec_driver_sql(sql, tuple(values))
    returned = cast(list[tuple[int, int, str]], inserted.all())  # id, position, digest
    return [(int(row_id), originals[(p, d)]) for row_id, p, d in returned]


def _drop(futures: Sequence[asyncio.Future[Any]]) -> None:
    """After a failed write: stop what is still reading, and take what failed."""
    for future in futures:
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()


ARCHIVE_COLUMNS = ("session_id", "checkpoint_id", "position", "digest", "message", "archived_at")


@functools.lru_cache(maxsize=8)
def archive_insert(dialect: str, rows: int) -> str:
    """One INSERT of `rows` archive rows, in the driver's own placeholders: its parameters
    are the rows' values in `ARCHIVE_COLUMNS` order, one after the other. Only the rows it
    inserts come back (id, position, digest); a copy archived before is left as it was.

    SQLAlchemy's handling of each row's parameters cost more than the insert itself (about
    2 s for 96,000 rows); a batch's values go to the driver as one flat tuple instead."""
    width = len(ARCHIVE_COLUMNS)
    if dialect == "postgresql":
        groups = [
            "(" + ", ".join(f"${row * width + column}" for column in range(1, width + 1)) + ")"
            for row in range(rows)
        ]
    else:
        groups = ["(" + ", ".join("?" * width) + ")"] * rows
    return (
        f"INSERT INTO {archived_messages.name} ({', '.join(ARCHIVE_COLUMNS)}) "
        f"VALUES {', '.join(groups)} "
        "ON CONFLICT (session_id, position, digest) DO NOTHING RETURNING id, position, digest"
    )


async def archived(conn: AsyncConnection, *session_ids: int) -> list[ArchivedMessage]:
    return await archived_in(conn, [(row_id, None) for row_id in session_ids])


async def archived_in(
    conn: AsyncConnection, spans: Sequence[lineages.Span]
) -> list[ArchivedMessage]:
    """The originals of a lineage's spans (see storage.rows.lineages), by position."""
    stmt = (
        select(archived_messages)
        .where(lineages.in_spans(list(spans)))
        .order_by(archived_messages.c.position, archived_messages.c.id)
    )
    return [
        ArchivedMessage(r.position, codec.loads(r.message), r.checkpoint_id, r.archived_at)
        for r in await conn.execute(stmt)
    ]


async def facts(conn: AsyncConnection, spans: Sequence[lineages.Span]) -> ArchiveFacts:
    """The newest checkpoint of the first span's row and the positions archived in them."""
    c = checkpoints.c
    newest = (
        await conn.execute(
            select(c.id, c.prefix_len, c.sources)
            .where(c.session_id == spans[0][0])
            .order_by(desc(c.id))
            .limit(1)
        )
    ).first()
    a = archived_messages.c
    positions = await conn.execute(
        select(a.position).where(lineages.in_spans(list(spans))).distinct()
    )
    archived = tuple(sorted(int(p) for p in positions.scalars()))
    if newest is None:
        return ArchiveFacts(None, 0, (), archived)
    return ArchiveFacts(newest.id, newest.prefix_len, _sources(newest.sources), archived)


async def archived_count(conn: AsyncConnection, session_id: int) -> int:
    stmt = select(func.count()).where(archived_messages.c.session_id == session_id)
    return int((await conn.execute(stmt)).scalar_one())


async def infos(conn: AsyncConnection, session_id: int) -> list[CheckpointInfo]:
    c = checkpoints.c
    stmt = (
        select(
            c.id,
            c.prefix_len,
            c.prefix_digest,
            c.message_count,
            c.tokens_before,
            c.tokens_after,
            c.summary,
            c.created_at,
        )
        .where(c.session_id == session_id)
        .order_by(c.id)
    )
    return [CheckpointInfo(*row) for row in await conn.execute(stmt)]
