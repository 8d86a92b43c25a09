"""Session rows: create on first touch, engine state, listings, delete."""

from __future__ import annotations

from typing import Any

from sqlalchemy import RowMapping, bindparam, delete, desc, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import codec
from storage.database.db import upsert
from storage.database.inline import Executor
from storage.database.tables import leases, sessions
from storage.errors import StorageError
from storage.records import JSONObject, SessionKey, SessionOrder, SessionRecord, Unset
from storage.rows import daily, retention

_by_key = (sessions.c.scope, sessions.c.key)


def where_key(sk: SessionKey) -> Any:
    return (sessions.c.scope == sk.scope) & (sessions.c.key == sk.key)


def new_row(sk: SessionKey, model: str, now: float) -> dict[str, Any]:
    """Column values of a session seen for the first time."""
    return {
        "scope": sk.scope,
        "key": sk.key,
        "model": model,
        "created_at": now,
        "updated_at": now,
        "engine_state": "{}",
        "root_key": sk.key,
    }


async def ensure(conn: AsyncConnection, sk: SessionKey, model: str, now: float) -> int:
    """The session's row id, inserting the row when the session is new."""
    stmt = upsert(conn, sessions).values(new_row(sk, model, now))
    stmt = stmt.on_conflict_do_update(
        index_elements=_by_key, set_={"updated_at": stmt.excluded.updated_at}
    )
    return int((await conn.execute(stmt.returning(sessions.c.id))).scalar_one())


async def find_id(conn: AsyncConnection, sk: SessionKey) -> int | None:
    row = (await conn.execute(select(sessions.c.id).where(where_key(sk)))).first()
    return None if row is None else int(row[0])


async def create_child(
    conn: AsyncConnection, parent: SessionKey, child_key: str, model: str, now: float
) -> int:
    """Insert a rotation child linked both ways; a taken child key is an error."""
    child = SessionKey(parent.scope, child_key)
    if await find_id(conn, child) is not None:
        raise StorageError(f"rotation target session {child_key!r} already exists")
    root = (await conn.execute(select(sessions.c.root_key).where(where_key(parent)))).scalar()
    row = new_row(child, model, now) | {"parent_key": parent.key, "root_key": root or parent.key}
    child_id = await conn.execute(sessions.insert().values(row).returning(sessions.c.id))
    await conn.execute(update(sessions).where(where_key(parent)).values(child_key=child_key))
    return int(child_id.scalar_one())


# Built once: building the statement costs more than SQLite's answer to it.
_GET = select(sessions).where(
    (sessions.c.scope == bindparam("scope")) & (sessions.c.key == bindparam("key"))
)


async def get(conn: Executor, sk: SessionKey) -> SessionRecord | None:
    found = await conn.execute(_GET, {"scope": sk.scope, "key": sk.key})
    row = found.mappings().first()
    return None if row is None else record_from_row(row)


async def get_by_id(conn: AsyncConnection, session_id: int) -> SessionRecord:
    row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))).mappings()
    return record_from_row(row.one())


async def save_engine_state(
    conn: AsyncConnection,
    sk: SessionKey,
    state: JSONObject,
    last_prompt_tokens: int | None | Unset,
    now: float,
) -> None:
    values: dict[str, Any] = {"engine_state": codec.dumps(state), "updated_at": now}
    if not isinstance(last_prompt_tokens, Unset):
        values["last_prompt_tokens"] = last_prompt_tokens
    stmt = upsert(conn, sessions).values(new_row(sk, "", now) | values)
    await conn.execute(stmt.on_conflict_do_update(index_elements=_by_key, set_=values))


async def list_sessions(
    conn: AsyncConnection, scope: str | None, limit: int, offset: int, order: SessionOrder
) -> list[SessionRecord]:
    """Newest activity first, or the most prompt tokens billed first."""
    by = {
        "last_activity": (desc(sessions.c.updated_at), desc(sessions.c.id)),
        "tokens": (desc(sessions.c.total_prompt_tokens), desc(sessions.c.updated_at)),
    }[order]
    stmt = select(sessions).order_by(*by).limit(limit).offset(offset)
    if scope is not None:
        stmt = stmt.where(sessions.c.scope == scope)
    return [record_from_row(row) for row in (await conn.execute(stmt)).mappings()]


async def delete_session(conn: AsyncConnection, sk: SessionKey, keep_totals: bool) -> bool:
    """Delete the row and, when `sk` is a client's id, every row of its lineages (forks and
    rotations name it as their root), with all they have: ON DELETE CASCADE takes their
    checkpoints, archive, events and usage; charges, shadow checks and leases, keyed by
    (scope, key), go here. With `keep_totals` the usage, charges and shadow checks are added
    into the daily totals first. Whether the session had a row."""
    c = sessions.c
    of_session = (c.scope == sk.scope) & ((c.key == sk.key) | (c.root_key == sk.key))
    rows = (await conn.execute(select(c.id, c.scope, c.key, c.model).where(of_session))).all()
    keys = {(sk.scope, sk.key)} | {(str(r.scope), str(r.key)) for r in rows}
    if keep_totals and rows:
        await retention.fold_usage(conn, {int(r.id): (str(r.scope), str(r.model)) for r in rows})
    await daily.forget(conn, keys, keep_totals)
    await conn.execute(delete(leases).where(tuple_(leases.c.scope, leases.c.key).in_(keys)))
    if rows:
        await conn.execute(delete(sessions).where(c.id.in_([int(r.id) for r in rows])))
    return bool(rows)


def record_from_row(row: RowMapping) -> SessionRecord:
    state = codec.loads(row["engine_state"])
    return SessionRecord(
        scope=row["scope"],
        key=row["key"],
        model=row["model"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_prompt_tokens=row["last_prompt_tokens"],
        last_completion_tokens=row["last_completion_tokens"],
        last_message_count=row["last_message_count"],
        last_usage_estimated=bool(row["last_usage_estimated"]),
        last_usage_at=row["last_usage_at"],
        request_count=row["request_count"],
        compression_count=row["compression_count"],
        total_prompt_tokens=row["total_prompt_tokens"],
        total_completion_tokens=row["total_completion_tokens"],
        engine_state=state if isinstance(state, dict) else {},
        parent_key=row["parent_key"],
        child_key=row["child_key"],
        last_compression_at=row["last_compression_at"],
        root_key=row["root_key"],
        fork_of=row["fork_of"],
        fork_len=row["fork_len"],
        tip_len=row["tip_len"],
        tip_digest=row["tip_digest"],
    )


def fork_pattern(root: str) -> str:
    """LIKE pattern (escape `\\`) of the keys of a root's forks: "<root>#..."."""
    return root.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "#%"
