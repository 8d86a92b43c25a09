"""Lineages of one session id in storage: forks, their archive, their tips, the bound, the
migration of databases made before them (SQLite files in tmp dirs; PostgreSQL when set)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage import Fork, SessionKey, SessionStore, UsageRecord
from storage.database.db import Database
from tests.storage.factories import FakeClock, chain_digests, commit, history

SK = SessionKey("scope-a", "task")
MAIN = history(20)
OTHER = [*MAIN[:6], *history(14, tag="other ")]  # diverges at position 6
D_MAIN, D_OTHER = chain_digests(MAIN), chain_digests(OTHER)


def fork(key: str, fork_of: str | None, fork_len: int, digests: list[str], **over: Any) -> Fork:
    values: dict[str, Any] = {
        "root": SK,
        "key": key,
        "model": "gpt-test",
        "fork_of": fork_of,
        "fork_len": fork_len,
        "tip_len": len(digests),
        "tip_digest": digests[-1],
        "engine_state": {},
        "max_lineages": 8,
    }
    return Fork(**(values | over))


async def test_a_fork_keeps_its_own_checkpoints_and_reads_the_shared_archive_below_the_fork(
    store: SessionStore,
) -> None:
    archived_main = [(p, MAIN[p]) for p in range(1, 12)]
    await store.commit_compression(commit(SK, D_MAIN, 12, archived=archived_main))
    # The other branch shares the first 6 messages: it inherits the archive below 6 only.
    created = await store.fork_lineage(fork("task#b", SK.key, 6, D_OTHER))
    assert (created.root_key, created.fork_of, created.fork_len) == ("task", "task", 6)
    assert (created.tip_len, created.tip_digest) == (20, D_OTHER[-1])
    fork_sk = SessionKey(SK.scope, "task#b")
    archived_other = [(p, OTHER[p]) for p in range(6, 14)]
    mine = await store.commit_compression(commit(fork_sk, D_OTHER, 14, archived=archived_other))
    # Each branch's checkpoint is found under the session id and names its lineage.
    found_main = await store.find_checkpoint(SK, D_MAIN)
    found_other = await store.find_checkpoint(SK, D_OTHER)
    assert found_main is not None and found_main.key == "task" and found_main.prefix_len == 12
    assert found_other is not None and found_other.key == "task#b" and found_other == mine
    # Archive: no position of one branch from 6 on shows in the other's.
    other = {a.position: a.message for a in await store.lineage_archive(fork_sk)}
    main = {a.position: a.message for a in await store.lineage_archive(SK)}
    assert other == {p: OTHER[p] for p in range(1, 14)}
    assert main == {p: MAIN[p] for p in range(1, 12)}
    facts = await store.archive_facts(fork_sk)
    assert facts is not None and facts.checkpoint_id == mine.id
    assert facts.archived == tuple(range(1, 14))
    lineages = await store.live_lineages(SK)
    assert sorted(r.key for r in lineages) == ["task", "task#b"]


async def test_usage_moves_the_tip_and_an_undigested_request_leaves_it(
    store: SessionStore, clock: FakeClock
) -> None:
    await store.commit_compression(commit(SK, D_MAIN, 10))
    row = await store.get_session(SK)
    assert row is not None and (row.tip_len, row.tip_digest) == (10, D_MAIN[9])
    clock.advance(1)
    usage = UsageRecord(SK, "gpt-test", 900, 10, 14, at=clock.now, tip_len=14)
    await store.record_usage(usage)
    row = await store.get_session(SK)
    assert row is not None and row.tip_len == 10  # no digest came with it: unchanged
    clock.advance(1)
    await store.record_usage(
        UsageRecord(SK, "gpt-test", 950, 10, 16, at=clock.now, tip_len=16, tip_digest=D_MAIN[15])
    )
    row = await store.get_session(SK)
    assert row is not None and (row.tip_len, row.tip_digest) == (16, D_MAIN[15])


async def test_a_session_keeps_a_bounded_number_of_lineages(
    store: SessionStore, clock: FakeClock
) -> None:
    await store.commit_compression(commit(SK, D_MAIN, 10))
    for n in range(5):
        clock.advance(1)
        digests = chain_digests(history(8, tag=f"run {n} "))
        await store.fork_lineage(fork(f"task#{n}", None, 0, digests, max_lineages=3))
    live = await store.live_lineages(SK)
    # The session's own row and the two most recently started forks.
    assert [r.key for r in live] == ["task#4", "task#3", "task"]
    assert await store.get_session(SessionKey(SK.scope, "task#0")) is None


async def test_deleting_a_session_deletes_its_forks(store: SessionStore) -> None:
    await store.commit_compression(commit(SK, D_MAIN, 10))
    await store.fork_lineage(fork("task#b", SK.key, 6, D_OTHER))
    other = SessionKey(SK.scope, "task_other")  # a LIKE wildcard in an unrelated id
    await store.commit_compression(commit(other, D_MAIN, 10))
    assert await store.delete_session(SK)
    assert await store.live_lineages(SK) == []
    assert await store.get_session(SessionKey(SK.scope, "task#b")) is None
    assert await store.get_session(other) is not None


async def test_a_database_from_before_lineages_gains_roots(store_url: str) -> None:
    """Rows written before the migration: a rotation child takes its parent's root."""
    store = await SessionStore.open(store_url)
    try:
        await store.commit_compression(commit(SK, D_MAIN, 8))
        await store.commit_compression(commit(SK, D_MAIN, 12, rotate_to="task~2"))
    finally:
        await store.close()
    db = Database.connect(store_url)
    try:

        async def make_it_old(conn: AsyncConnection) -> None:
            await conn.execute(text("DROP INDEX ix_sessions_scope_root"))
            for column in ("root_key", "fork_of", "fork_len", "tip_len", "tip_digest"):
                await conn.execute(text(f"ALTER TABLE sessions DROP COLUMN {column}"))
            await conn.execute(text("DELETE FROM schema_version WHERE name = 'session_lineages'"))

        await db.write(make_it_old)
    finally:
        await db.dispose()
    store = await SessionStore.open(store_url)
    try:
        child = await store.get_session(SessionKey(SK.scope, "task~2"))
        found = await store.find_checkpoint(SK, D_MAIN)
    finally:
        await store.close()
    assert child is not None and child.root_key == "task" and child.tip_len is None
    assert found is not None and found.key == "task~2" and found.prefix_len == 12
