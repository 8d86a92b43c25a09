"""Lineages: the conversations one client session id holds when its history forks.

A session's first conversation lives in the session's own row (and the rows it rotates into).
A request that extends none of the session's lineage tips (a rewind, an edited message, a
parallel run with the same opening) starts a fork: a row of its own, named "<id>#<tag>", with
its own checkpoints, engine state, anchor and archive. The fork shares its first `fork_len`
client messages with the row it came from, so its archive also reads that row's originals of
those positions (and, further up, what that row inherited). A session keeps at most
`max_lineages` live lineages: the least recently active fork goes first.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, bindparam, delete, desc, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import codec
from storage.database.db import upsert
from storage.database.inline import Executor
from storage.database.tables import archived_messages, sessions
from storage.records import Fork, SessionKey, SessionRecord
from storage.rows.sessions import fork_pattern, get, new_row, record_from_row, where_key

# (row id, client positions below which its originals belong to the lineage; None: all)
Span = tuple[int, int | None]

_MAX_HOPS = 1000


async def live(conn: AsyncConnection, root: SessionKey) -> list[SessionRecord]:
    """The rows a request of `root` may continue: one per lineage (rotated rows left out),
    the most recently active first."""
    c = sessions.c
    stmt = (
        select(sessions)
        .where(c.scope == root.scope, c.root_key == root.key, c.child_key.is_(None))
        .order_by(desc(c.updated_at), desc(c.id))
    )
    return [record_from_row(row) for row in (await conn.execute(stmt)).mappings()]


async def fork(conn: AsyncConnection, f: Fork, now: float) -> SessionRecord:
    """Create the fork's row (or find it, when another replica just did) and make room."""
    sk = SessionKey(f.root.scope, f.key)
    row = new_row(sk, f.model, now) | {
        "root_key": f.root.key,
        "fork_of": f.fork_of,
        "fork_len": f.fork_len,
        "tip_len": f.tip_len,
        "tip_digest": f.tip_digest,
        "engine_state": codec.dumps(f.engine_state),
    }
    stmt = upsert(conn, sessions).values(row)
    await conn.execute(
        stmt.on_conflict_do_nothing(index_elements=[sessions.c.scope, sessions.c.key])
    )
    await _evict(conn, f.root, keep=f.key, room=max(1, f.max_lineages - 1))
    found = await get(conn, sk)
    assert found is not None  # inserted above, in this transaction
    return found


async def _evict(conn: AsyncConnection, root: SessionKey, keep: str, room: int) -> None:
    """Delete the least recently active forks beyond `room` (the session's own row stays)."""
    c = sessions.c
    forks = and_(
        c.scope == root.scope,
        c.root_key == root.key,
        c.child_key.is_(None),
        c.key.like(fork_pattern(root.key), escape="\\"),
    )
    count = (await conn.execute(select(func.count()).where(forks))).scalar_one()
    if count <= room:
        return
    stale = await conn.execute(
        select(c.key)
        .where(forks, c.key != keep)
        .order_by(c.updated_at, c.id)
        .limit(int(count) - room)
    )
    for key in list(stale.scalars()):
        await _delete_chain(conn, SessionKey(root.scope, key), root)


async def _delete_chain(conn: AsyncConnection, sk: SessionKey, root: SessionKey) -> None:
    """A fork's live row and the rows it rotated from (all named after the fork)."""
    key: str | None = sk.key
    for _ in range(_MAX_HOPS):
        if key is None or not key.startswith(root.key + "#"):
            return
        at = SessionKey(sk.scope, key)
        parent = (await conn.execute(select(sessions.c.parent_key).where(where_key(at)))).scalar()
        await conn.execute(delete(sessions).where(where_key(at)))
        key = parent


# One hop of `spans`, built once: on SQLite it then runs without SQLAlchemy's per-statement
# work (storage.database.inline), on every search of the archive.
_HOP = select(sessions.c.id, sessions.c.parent_key, sessions.c.fork_of, sessions.c.fork_len).where(
    sessions.c.scope == bindparam("scope"), sessions.c.key == bindparam("key")
)


async def spans(conn: Executor, sk: SessionKey) -> list[Span]:
    """The rows whose originals make up the lineage's archive, newest first: its own and
    those it rotated from whole; those it forked from below the fork's length."""
    found: list[Span] = []
    seen: set[int] = set()
    key: str | None = sk.key
    cap: int | None = None
    while key is not None and len(found) < _MAX_HOPS:
        row = (await conn.execute(_HOP, {"scope": sk.scope, "key": key})).first()
        if row is None or row.id in seen:
            break
        seen.add(row.id)
        found.append((int(row.id), cap))
        if row.parent_key is not None:
            key = row.parent_key
        elif row.fork_of is not None:
            fork_len = int(row.fork_len or 0)
            cap = fork_len if cap is None else min(cap, fork_len)
            key = row.fork_of
        else:
            key = None
    return found


def in_spans(found: list[Span]) -> ColumnElement[bool]:
    """The archive rows of those spans, as a WHERE clause."""
    a = archived_messages.c
    return or_(
        *(
            a.session_id == row_id
            if cap is None
            else and_(a.session_id == row_id, a.position < cap)
            for row_id, cap in found
        )
    )
