"""A search ranks only the newest `search.CANDIDATES` matches of the lineage: what it costs stays
flat as the archive grows, and another session's matches never take a candidate's place."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import SessionKey, SessionStore
from storage.database.db import Database
from storage.rows import search
from tests.storage.factories import chain_digests, commit, history

SK = SessionKey("scope-a", "quiet")
BUSY = SessionKey("scope-a", "busy")
SIZE = search.CANDIDATES + 40
DIGESTS = chain_digests(history(SIZE + 10))


def said(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": text_}


async def test_a_busy_session_never_pushes_a_lineage_out_of_its_candidates(
    store: SessionStore,
) -> None:
    """The quiet session's one match is older than more than CANDIDATES of the busy one's."""
    await store.commit_compression(
        commit(SK, DIGESTS, 4, archived=[(2, said("The north gate code is GC-7."))])
    )
    newer = [(i, said(f"The north gate opened at {i}.")) for i in range(SIZE)]
    await store.commit_compression(commit(BUSY, DIGESTS, SIZE + 1, archived=newer))
    assert [a.position for a in await store.search_archive(SK, "north gate")] == [2]
    assert [a.position for a in await store.search_archive(SK, "gate opened code")] == [2]
    assert len(await store.search_archive(BUSY, "north gate", limit=3)) == 3


async def test_over_more_matches_the_best_of_the_newest_candidates_come_back(
    store: SessionStore,
) -> None:
    """The best matches (the word thrice, in a short message) are the oldest: past the bound,
    the newest matches are what is ranked."""
    best = [(i, said("deploy deploy deploy")) for i in range(5)]
    rest = [(i, said(f"Then deploy the build to staging, run {i}.")) for i in range(5, SIZE)]
    await store.commit_compression(commit(SK, DIGESTS, 5, archived=best))
    await store.commit_compression(commit(SK, DIGESTS, SIZE + 1, archived=rest))
    found = [a.position for a in await store.search_archive(SK, "deploy", limit=5)]
    assert found == [SIZE - 1 - i for i in range(5)]  # equals among the newest: later first
    assert min(found) >= SIZE - search.CANDIDATES


async def test_the_bound_is_counted_in_the_lineages_matches(store_url: str) -> None:
    """With room for every match the best win; with room for the newest two, the best of
    those, whatever the other sessions hold."""
    store = await SessionStore.open(store_url)
    try:
        await store.commit_compression(
            commit(SK, DIGESTS, 4, archived=[(i, said("deploy deploy deploy")) for i in (1, 2)])
        )
        others = [(i, said("deploy deploy deploy deploy")) for i in range(50)]
        await store.commit_compression(commit(BUSY, DIGESTS, 51, archived=others))
        later = [(i, said(f"deploy the build, take {i}")) for i in range(3, 7)]
        await store.commit_compression(commit(SK, DIGESTS, 8, archived=later))
    finally:
        await store.close()
    db = Database.connect(store_url)
    try:

        async def read(conn: AsyncConnection) -> tuple[list[int], ...]:
            sql = "SELECT id FROM sessions WHERE key = :key"
            row_id = (await conn.execute(text(sql), {"key": SK.key})).scalar_one()
            spans = [(row_id, None)]
            return tuple(
                [
                    [
                        a.position
                        for a in await search.search(conn, spans, "deploy", 3, candidates=n)
                    ]
                    for n in (100, 2, 1)
                ]
            )

        everything, two, one = await db.read(read)
    finally:
        await db.dispose()
    assert everything[:2] == [2, 1]
    assert two == [6, 5]
    assert one == [6]


async def test_sqlite_takes_the_candidates_from_the_index_newest_first(sqlite_url: str) -> None:
    """FTS5 yields the matches in rowid order itself (no sort of every match before the
    bound); the one sort left ranks the candidates."""
    store = await SessionStore.open(sqlite_url)
    await store.close()
    db = Database.connect(sqlite_url)
    try:

        async def plan(conn: AsyncConnection) -> list[str]:
            sql = search.search_sql("sqlite", [(1, None), (2, 7)])
            params = {"query": '"x"', "limit": 5, "candidates": 10, "span0": 1}
            params |= {"span1": 2, "cap1": 7}
            rows = await conn.execute(text("EXPLAIN QUERY PLAN " + sql), params)
            return [str(row[-1]) for row in rows]

        steps = await db.read(plan)
    finally:
        await db.dispose()
    scan = next(i for i, step in enumerate(steps) if step.startswith(f"SCAN {search.TABLE}"))
    assert steps[scan - 1] == "CO-ROUTINE c"
    assert [s for s in steps if "TEMP B-TREE" in s] == ["USE TEMP B-TREE FOR ORDER BY"]
    assert steps.index("USE TEMP B-TREE FOR ORDER BY") > steps.index("SCAN c")
