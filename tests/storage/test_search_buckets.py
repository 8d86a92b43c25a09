"""PostgreSQL searches the newest buckets of ids first: what comes back is exactly the newest
`candidates` matches of the lineage, however the windows fall, and a database indexed before
rows held their bucket gains it when opened."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import SessionKey, SessionStore, search
from storage.db import Database
from tests.storage.conftest import PG_ENV, _reset_postgres
from tests.storage.factories import chain_digests, commit, history

pytestmark = pytest.mark.postgres

QUIET = SessionKey("scope-a", "quiet")
BUSY = SessionKey("scope-a", "busy")
BUSY_ROWS = 3 * search.BUCKET  # the busy session's rows span buckets 0 to 3
DIGESTS = chain_digests(history(BUSY_ROWS + 10))


@pytest.fixture
async def pg_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    await _reset_postgres(url)
    return url


def said(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": text_}


async def _fill(url: str) -> None:
    """Quiet's matches before and after the busy session's (every other one of which
    matches), so quiet's windows hold another session's matches and skip none of its own."""
    store = await SessionStore.open(url)
    try:
        early = [(i, said(f"north gate log {i}")) for i in range(40)]
        await store.commit_compression(commit(QUIET, DIGESTS, 41, archived=early))
        busy = [
            (i, said(f"north gate {i}" if i % 2 else f"south wall {i}")) for i in range(BUSY_ROWS)
        ]
        await store.commit_compression(commit(BUSY, DIGESTS, BUSY_ROWS + 1, archived=busy))
        late = [(i, said(f"north gate late {i}")) for i in range(40, 70)]
        await store.commit_compression(commit(QUIET, DIGESTS, 71, archived=late))
    finally:
        await store.close()


async def _span(conn: AsyncConnection, sk: SessionKey) -> list[tuple[int, int | None]]:
    sql = "SELECT id FROM sessions WHERE key = :key"
    return [((await conn.execute(text(sql), {"key": sk.key})).scalar_one(), None)]


async def _newest_matches(
    conn: AsyncConnection, sk: SessionKey, query: str, candidates: int
) -> set[int]:
    """The definition, by brute force: every match of the session, newest `candidates`."""
    sql = (
        f"SELECT a.position FROM {search.TABLE} AS s JOIN archived_messages AS a ON a.id = s.id "
        "WHERE s.terms @@ CAST(:q AS tsquery) AND a.session_id = :sid "
        "ORDER BY a.id DESC LIMIT :n"
    )
    ((sid, _),) = await _span(conn, sk)
    found = await conn.execute(text(sql), {"q": query, "sid": sid, "n": candidates})
    return set(found.scalars())


# (query, its tsqueries: strict, then loose when that finds nothing): more matches than
# search.FEW in many windows, an old lineage's only matches (the busy session's rows newer),
# and a match too rare for windows.
QUERIES = [
    ("north gate", ("'north' & 'gate'", "'north' | 'gate'")),
    ("log", ("'log'", "'log'")),
    ("late 45", ("'late' & '45'", "'late' | '45'")),
]


async def test_the_windows_return_exactly_the_newest_matches(pg_url: str) -> None:
    await _fill(pg_url)
    db = Database.connect(pg_url)
    try:

        async def compare(conn: AsyncConnection) -> list[tuple[Any, ...]]:
            out = []
            for sk in (QUIET, BUSY):
                spans = await _span(conn, sk)
                for (query, (strict, loose)), n, window in itertools.product(
                    QUERIES, (1, 5, 35, 60, 500, 2000), (1, 2, search.MAX_WINDOW)
                ):
                    got = await search.search(
                        conn, spans, query, 5000, candidates=n, max_window=window
                    )
                    want = await _newest_matches(conn, sk, strict, n)
                    want = want or await _newest_matches(conn, sk, loose, n)
                    out.append((sk.key, query, n, window, {a.position for a in got}, want))
            return out

        results = await db.read(compare)
    finally:
        await db.dispose()
    for key, query, n, window, got, want in results:
        assert got == want, (key, query, n, window)
    found = {(r[0], r[1], r[2], r[3]): r[4] for r in results}
    assert found["quiet", "north gate", 500, 1] == set(range(70))
    assert found["quiet", "north gate", 35, 1] == set(range(35, 70))
    assert found["quiet", "log", 35, 2] == set(range(5, 40))
    assert found["quiet", "late 45", 1, 64] == {45}
    assert len(found["busy", "north gate", 2000, 1]) == BUSY_ROWS // 2
    assert found["busy", "log", 5, 1] == set()
    assert found["busy", "late 45", 1, 1] == {45}  # the loose reading: 45 alone


async def _search_positions(url: str, query: str) -> list[int]:
    store = await SessionStore.open(url)
    try:
        return sorted(a.position for a in await store.search_archive(QUIET, query, limit=100))
    finally:
        await store.close()


async def test_an_index_without_buckets_gains_them_when_opened(pg_url: str) -> None:
    await _fill(pg_url)
    db = Database.connect(pg_url)
    buckets: Sequence[str] = [f"~b{b}" for b in range(4)]
    try:

        async def make_it_old(conn: AsyncConnection) -> None:
            await conn.execute(
                text(f"UPDATE {search.TABLE} SET terms = ts_delete(terms, CAST(:b AS text[]))"),
                {"b": list(buckets)},
            )
            await conn.execute(
                text("DELETE FROM schema_version WHERE name = 'archive_search_buckets'")
            )

        await db.write(make_it_old)
    finally:
        await db.dispose()
    db = Database.connect(pg_url)
    try:

        async def old_search(conn: AsyncConnection) -> list[Any]:
            return await search.search(conn, await _span(conn, QUIET), "north gate", 100)

        assert await db.read(old_search) == []  # nothing holds a bucket: nothing found
    finally:
        await db.dispose()
    assert await _search_positions(pg_url, "north gate") == list(range(70))
    assert await _search_positions(pg_url, "late 45") == [45]
