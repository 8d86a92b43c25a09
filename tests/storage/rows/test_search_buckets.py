"""PostgreSQL searches the newest buckets of ids first: what comes back is exactly the newest
`candidates` matches of the lineage, however the windows fall, and a database indexed before
rows held their bucket gains it when opened."""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import SessionKey, SessionStore, codec
from storage.database.db import Database
from storage.database.tables import sessions
from storage.rows import search
from storage.rows.terms import search_terms
from tests.storage.factories import PG_ENV, chain_digests, commit, history, reset_postgres

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
    await reset_postgres(url)
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


# Words of the fuzzed archive: common, rarer (fewer than search.FEW matches), one nowhere.
VOCABULARY = ["alpha"] * 30 + ["beta"] * 10 + ["gamma"] * 4 + ["delta", "eps", "zeta", "eta"]
QUERY_WORDS = ["alpha", "beta", "gamma", "delta", "eps", "w3", "w7", "nowhere"]


async def _fill_sparse(
    conn: AsyncConnection, rnd: random.Random, top_id: int
) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Rows at sparse ids up to `top_id` (hundreds of buckets apart), spread over four
    sessions, positions archived again under newer ids; a fifth session archives nothing."""
    sids = []
    for s in range(5):
        row = insert(sessions).values(scope="s", key=f"k{s}", created_at=0, updated_at=0)
        sids.append((await conn.execute(row.returning(sessions.c.id))).scalar_one())
    ids = sorted(rnd.sample(range(1, top_id), min(rnd.randint(50, 2500), top_id - 2)))
    positions = rnd.choice([20, 200, 3000])
    rows = {}
    words = VOCABULARY + [f"w{i}" for i in range(20)]
    for id_ in ids:
        sid = rnd.choice(sids[:4]) if rnd.random() < 0.7 else sids[0]
        content = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6)))
        rows[id_] = (sid, rnd.randrange(positions), said(content))
    await conn.execute(
        text(
            "INSERT INTO archived_messages (id, session_id, position, digest, message, "
            "archived_at) VALUES (:id, :sid, :pos, :digest, :message, 0)"
        ),
        [
            {"id": i, "sid": s, "pos": p, "digest": f"d{i}", "message": codec.dumps(m)}
            for i, (s, p, m) in rows.items()
        ],
    )
    await search.index(conn, [(i, m) for i, (_, _, m) in rows.items()])
    return sids, {i: (s, p) for i, (s, p, _) in rows.items()}


async def _brute_force(
    conn: AsyncConnection,
    rows: dict[int, tuple[int, int]],
    spans: list[tuple[int, int | None]],
    query: str,
    candidates: int,
    limit: int,
) -> list[int]:
    """The definition: the newest copy of each position of the spans; of those matching,
    the newest `candidates`, ranked (a later position first among equals); strict reading
    first, the loose one when it finds nothing."""
    newest: dict[int, int] = {}
    for id_, (sid, position) in sorted(rows.items()):
        if any(sid == s and (cut is None or position < cut) for s, cut in spans):
            newest[position] = id_
    kept = set(newest.values())
    groups = search._groups(search_terms(query))
    strict = search._expression("postgresql", groups, "AND", parts=False)
    loose = search._expression("postgresql", groups, "OR", parts=True)
    sql = (
        f"SELECT id, ts_rank(terms, CAST(:q AS tsquery)) FROM {search.TABLE} "
        "WHERE terms @@ CAST(:q AS tsquery)"
    )
    want: list[int] = []
    for expression in (strict, loose):
        matches = (await conn.execute(text(sql), {"q": expression})).all()
        newest_first = sorted(((i, r) for i, r in matches if i in kept), reverse=True)
        ranked = sorted(newest_first[:candidates], key=lambda m: (-m[1], -rows[m[0]][1]))
        want = [rows[i][1] for i, _ in ranked][:limit]
        if want or loose == strict:
            break
    return want


@pytest.mark.parametrize("seed, top_id", [(0, 900), (1, 70_000), (2, 400_000), (3, 2_000_000)])
async def test_sparse_ids_over_many_buckets_rank_as_brute_force(
    pg_url: str, seed: int, top_id: int
) -> None:
    """Whatever the spans, cuts, candidates, windows and limit, the search returns what the
    definition does, in its order."""
    rnd = random.Random(seed)
    await (await SessionStore.open(pg_url)).close()  # the schema
    db = Database.connect(pg_url)
    try:
        sids, rows = await db.write(lambda conn: _fill_sparse(conn, rnd, top_id))

        async def compare(conn: AsyncConnection) -> list[tuple[Any, ...]]:
            out = []
            for _ in range(40):
                query = " ".join(rnd.sample(QUERY_WORDS, rnd.randint(1, 3)))
                spans = [
                    (s, rnd.choice([None, None, rnd.randrange(1, 3000)]))
                    for s in rnd.sample(sids, rnd.randint(1, 3))
                ]
                n = rnd.choice([1, 2, 5, 31, 32, 33, 100, 500])
                window = rnd.choice([0, 1, 2, 4, 16, 64, 1000])
                limit = rnd.choice([1, 3, 10, 10000])
                found = await search.search(
                    conn, spans, query, limit, candidates=n, max_window=window
                )
                want = await _brute_force(conn, rows, spans, query, n, limit)
                out.append((query, spans, n, window, limit, [a.position for a in found], want))
            return out

        results = await db.read(compare)
    finally:
        await db.dispose()
    for query, spans, n, window, limit, got, want in results:
        assert got == want, (query, spans, n, window, limit)
    assert sum(1 for r in results if r[-1]) >= 10  # most searches find something
