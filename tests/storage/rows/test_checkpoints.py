import dataclasses
import sqlite3
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import PROMPT_TOKENS_PENDING, SessionKey, SessionStore, StorageError
from storage.rows.checkpoints import ARCHIVE_BATCH
from tests.storage.factories import (
    FakeClock,
    chain_digests,
    commit,
    event,
    history,
    insert_checkpoints,
    row_counts,
)

SK = SessionKey("scope-a", "session-1")
DIGESTS = chain_digests(history(12))


async def test_no_checkpoint_yet(store: SessionStore) -> None:
    assert await store.find_checkpoint(SK, DIGESTS) is None
    assert await store.find_checkpoint(SK, []) is None


async def test_commit_then_find(store: SessionStore, clock: FakeClock) -> None:
    replacement = [{"role": "system", "content": "sys"}, {"role": "user", "content": "summary"}]
    written = await store.commit_compression(commit(SK, DIGESTS, 8, replacement=replacement))
    found = await store.find_checkpoint(SK, DIGESTS)
    assert found == written
    assert (found.prefix_len, found.messages, found.created_at) == (8, replacement, clock())
    assert found.sk == SK


async def test_longest_prefix_wins_then_newest(store: SessionStore, clock: FakeClock) -> None:
    await store.commit_compression(commit(SK, DIGESTS, 4))
    clock.advance(1)
    first_at_8 = await store.commit_compression(commit(SK, DIGESTS, 8))
    clock.advance(1)
    second_at_8 = await store.commit_compression(commit(SK, DIGESTS, 8))
    clock.advance(1)
    await store.commit_compression(commit(SK, DIGESTS, 6))
    found = await store.find_checkpoint(SK, DIGESTS)
    assert found is not None and found.id == second_at_8.id != first_at_8.id


async def test_checkpoint_longer_than_the_request_is_ignored(store: SessionStore) -> None:
    short = await store.commit_compression(commit(SK, DIGESTS, 3))
    await store.commit_compression(commit(SK, DIGESTS, 10))
    found = await store.find_checkpoint(SK, DIGESTS[:6])  # a regeneration of turn 6
    assert found is not None and found.id == short.id


async def test_edited_history_matches_nothing(store: SessionStore) -> None:
    await store.commit_compression(commit(SK, DIGESTS, 8))
    edited = chain_digests([{"role": "user", "content": "changed"}, *history(12)[1:]])
    assert await store.find_checkpoint(SK, edited) is None


async def test_digest_at_another_position_does_not_match(store: SessionStore) -> None:
    bad = dataclasses.replace(commit(SK, DIGESTS, 8), prefix_digest=DIGESTS[2])
    await store.commit_compression(bad)
    assert await store.find_checkpoint(SK, DIGESTS) is None


async def test_another_scope_never_sees_the_checkpoint(store: SessionStore) -> None:
    await store.commit_compression(commit(SK, DIGESTS, 8))
    assert await store.find_checkpoint(SessionKey("scope-b", SK.key), DIGESTS) is None


async def test_histories_longer_than_one_in_chunk(store: SessionStore) -> None:
    digests = chain_digests(history(1200))
    early = await store.commit_compression(commit(SK, digests, 300))
    late = await store.commit_compression(commit(SK, digests, 1100))
    assert (await store.find_checkpoint(SK, digests)) == late
    assert (await store.find_checkpoint(SK, digests[:1000])) == early  # beyond the first lookup
    assert await store.find_checkpoint(SK, digests[:299]) is None


async def test_find_among_5000_checkpoints(store: SessionStore, store_url: str) -> None:
    digests = chain_digests(history(5000))
    await insert_checkpoints(store_url, SK, digests, range(1, 5001))
    started = time.perf_counter()
    found = await store.find_checkpoint(SK, digests)
    assert found is not None and found.prefix_len == 5000
    found = await store.find_checkpoint(SK, digests[:2345])
    assert found is not None and found.prefix_len == 2345
    assert await store.find_checkpoint(SK, chain_digests(history(5000, tag="x"))) is None
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"\n3 finds among 5000 checkpoints on {store.dialect}: {elapsed_ms:.1f} ms")


async def test_commit_updates_the_session(store: SessionStore, clock: FakeClock) -> None:
    cp = await store.commit_compression(commit(SK, DIGESTS, 8, state={"strikes": 0}))
    s = await store.get_session(SK)
    assert s is not None
    assert (s.compression_count, s.last_prompt_tokens, s.engine_state) == (
        1,
        PROMPT_TOKENS_PENDING,
        {"strikes": 0},
    )
    assert s.last_compression_at == clock() and s.model == "gpt-test"
    detail = await store.session_detail(SK)
    assert detail is not None
    assert [(e.checkpoint_id, e.trigger, e.outcome) for e in detail.events] == [
        (cp.id, "agent", "ok")
    ]
    assert [(c.id, c.prefix_len, c.message_count) for c in detail.checkpoints] == [(cp.id, 8, 1)]


async def test_failed_event_insert_leaves_no_checkpoint(
    store: SessionStore, store_url: str
) -> None:
    archived = [(i, m) for i, m in enumerate(history(8))]
    with pytest.raises(StorageError):
        # A negative duration violates a CHECK constraint: the last insert of the transaction.
        await store.commit_compression(commit(SK, DIGESTS, 8, archived=archived, duration_ms=-1))
    assert await store.find_checkpoint(SK, DIGESTS) is None
    assert await store.get_session(SK) is None
    counts = await row_counts(store_url)
    assert counts["checkpoints"] == counts["archived_messages"] == counts["events"] == 0


async def test_archive_dedupes_by_position_and_content(store: SessionStore) -> None:
    messages = history(12)
    first = await store.commit_compression(
        commit(SK, DIGESTS, 6, archived=list(enumerate(messages[:6])))
    )
    # The next pass replaces 0..9 again; 0..5 were archived already. Key order must not matter.
    again = [(i, dict(reversed(m.items()))) for i, m in enumerate(messages[:10])]
    again[3] = (3, {"role": "assistant", "content": "the same slot, different text"})
    second = await store.commit_compression(commit(SK, DIGESTS, 10, archived=again))
    archive = await store.archived_messages(SK)
    assert [(a.position, a.checkpoint_id) for a in archive] == [
        (0, first.id), (1, first.id), (2, first.id), (3, first.id), (3, second.id),
        (4, first.id), (5, first.id), (6, second.id), (7, second.id), (8, second.id),
        (9, second.id),
    ]  # fmt: skip
    assert archive[0].message == messages[0]


async def test_an_archive_of_many_batches_stores_and_indexes_each_new_original_once(
    store: SessionStore, store_url: str
) -> None:
    size = ARCHIVE_BATCH * 2 + 500  # three insert statements, the last one short
    messages = [{"role": "user", "content": f"note {i} token{i}x é"} for i in range(size)]
    digests = chain_digests(messages)
    first = await store.commit_compression(
        commit(SK, digests, 1200, archived=list(enumerate(messages[:1200])))
    )
    # Again from 0: the first 1,200 were archived already (a batch holds old and new), one
    # slot now holds other text, and one original is listed twice.
    again = list(enumerate(messages))
    again[5] = (5, {"role": "user", "content": "other text token5x"})
    again.append((size - 1, messages[size - 1]))
    second = await store.commit_compression(commit(SK, digests, size, archived=again))
    archive = await store.archived_messages(SK)
    expected = [(p, first.id, messages[p]) for p in range(1200)]
    expected.append((5, second.id, again[5][1]))
    expected += [(p, second.id, messages[p]) for p in range(1200, size)]
    expected.sort(key=lambda row: (row[0], row[1]))
    assert [(a.position, a.checkpoint_id, a.message) for a in archive] == expected
    counts = await row_counts(store_url)
    assert counts["archived_messages"] == size + 1
    if "sqlite" in store_url:
        assert await _index_rows(store_url) == size + 1
    # Each original is found by its own term, in the first batch, the middle and the last.
    for position in (0, 1199, 1200, size - 1):
        found = await store.search_archive(SK, f"token{position}x", limit=3)
        assert [a.position for a in found] == [position]
    # Both copies of the changed slot are indexed; a search reads its newest.
    found = await store.search_archive(SK, "token5x")
    assert [(a.position, a.message) for a in found] == [(5, again[5][1])]


async def _index_rows(url: str) -> int:
    """Rows of SQLite's full-text index (row_counts reads the declared tables only)."""
    path = url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM archive_search").fetchone()[0])


async def test_large_unicode_replacement_round_trips(store: SessionStore) -> None:
    big = "résumé 🤖 " * 15_000 + "\ud800 lone surrogate"  # ~150 KB
    replacement = [{"role": "user", "content": big, "extra": {"nested": [1, None, True]}}]
    await store.commit_compression(commit(SK, DIGESTS, 8, replacement=replacement))
    found = await store.find_checkpoint(SK, DIGESTS)
    assert found is not None and found.messages == replacement


async def test_rotation_creates_a_linked_child(store: SessionStore) -> None:
    await store.commit_compression(commit(SK, DIGESTS, 4))
    archived = list(enumerate(history(8)))
    cp = await store.commit_compression(commit(SK, DIGESTS, 8, archived=archived, rotate_to="s1-2"))
    child_key = SessionKey(SK.scope, "s1-2")
    parent, child = await store.get_session(SK), await store.get_session(child_key)
    assert parent is not None and child is not None
    assert (parent.child_key, child.parent_key) == ("s1-2", SK.key)
    assert cp.sk == child_key and child.compression_count == 1
    assert child.last_prompt_tokens == PROMPT_TOKENS_PENDING
    # Found under the client's session id, whichever of its rows holds it.
    assert await store.find_checkpoint(SK, DIGESTS) == cp
    assert (child.root_key, parent.root_key) == (SK.key, SK.key)
    assert len(await store.archived_messages(child_key)) == 8


async def test_archive_facts_follow_the_newest_checkpoint_and_the_rotation_chain(
    store: SessionStore,
) -> None:
    assert await store.archive_facts(SK) is None
    messages = history(12)
    replacement = [messages[0], {"role": "user", "content": "summary"}, *messages[4:6]]
    first = commit(SK, DIGESTS, 6, replacement=replacement, sources=[0, None, 4, 5])
    await store.commit_compression(
        dataclasses.replace(first, archived=[(p, messages[p]) for p in (1, 2, 3)])
    )
    facts = await store.archive_facts(SK)
    assert facts is not None and facts.sources == (0, None, 4, 5)
    assert (facts.prefix_len, facts.archived) == (6, (1, 2, 3))
    found = await store.find_checkpoint(SK, DIGESTS)
    assert found is not None and found.sources == (0, None, 4, 5)
    # The next one, rotated: it archives what the first kept (4, 5) and what came after.
    second = commit(SK, DIGESTS, 10, sources=[0, None, 9], rotate_to="s1-next")
    archived = [(p, messages[p]) for p in (4, 5, 6, 7, 8, 8)]  # one twice: stored once
    cp = await store.commit_compression(dataclasses.replace(second, archived=archived))
    facts = await store.archive_facts(SessionKey(SK.scope, "s1-next"))
    assert facts is not None and facts.checkpoint_id == cp.id
    assert (facts.prefix_len, facts.sources, facts.archived) == (
        10,
        (0, None, 9),
        (1, 2, 3, 4, 5, 6, 7, 8),
    )
    legacy = await store.commit_compression(commit(SessionKey(SK.scope, "old"), DIGESTS, 4))
    facts = await store.archive_facts(SessionKey(SK.scope, "old"))
    assert facts is not None and facts.checkpoint_id == legacy.id and facts.sources is None


async def test_rotation_to_a_taken_key_writes_nothing(store: SessionStore) -> None:
    taken = SessionKey(SK.scope, "taken")
    await store.save_engine_state(taken, {})
    with pytest.raises(StorageError):
        await store.commit_compression(commit(SK, DIGESTS, 8, rotate_to="taken"))
    assert await store.get_session(SK) is None
    assert await store.find_checkpoint(taken, DIGESTS) is None


async def test_add_event_without_checkpoint(store: SessionStore, clock: FakeClock) -> None:
    event_id = await store.add_event(
        event(SK, outcome="failed", error="summary call timed out", tokens_after=0)
    )
    detail = await store.session_detail(SK)
    assert detail is not None and detail.session.compression_count == 0
    assert [(e.id, e.outcome, e.error, e.checkpoint_id, e.at) for e in detail.events] == [
        (event_id, "failed", "summary call timed out", None, clock())
    ]
    with pytest.raises(StorageError):
        await store.add_event(event(SK, messages_before=-5))


MAIN = chain_digests(history(60))
FORK = chain_digests(history(60, tag="fork "))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    written=st.lists(st.tuples(st.integers(1, 60), st.booleans()), max_size=8),
    n=st.integers(0, 60),
)
async def test_find_agrees_with_a_model(
    store: SessionStore, written: list[tuple[int, bool]], n: int
) -> None:
    sk = SessionKey("scope-a", uuid.uuid4().hex)  # a fresh session per example
    ids = []
    for length, on_fork in written:
        cp = await store.commit_compression(commit(sk, FORK if on_fork else MAIN, length))
        ids.append((length, cp.id, on_fork))
    candidates = [(length, cp_id) for length, cp_id, fork in ids if not fork and length <= n]
    found = await store.find_checkpoint(sk, MAIN[:n])
    expected = max(candidates, default=None)
    assert (None if found is None else (found.prefix_len, found.id)) == expected


async def test_a_checkpoint_found_again_is_not_read_again(store: SessionStore) -> None:
    replacement = [{"role": "user", "content": "summary " * 100}]
    written = await store.commit_compression(commit(SK, DIGESTS, 8, replacement=replacement))
    first = await store.find_checkpoint(SK, DIGESTS)
    again = await store.find_checkpoint(SK, DIGESTS)
    assert first == again == written
    assert again is first  # kept, not read and parsed again


async def test_a_checkpoint_written_in_place_of_a_deleted_one_is_read(
    store: SessionStore, clock: FakeClock
) -> None:
    """SQLite may give a deleted row's id to the next checkpoint: the kept one is not it."""
    old = await store.commit_compression(commit(SK, DIGESTS, 8))
    assert await store.find_checkpoint(SK, DIGESTS) == old
    assert await store.delete_session(SK, keep_totals=False)
    clock.advance(1)
    replacement = [{"role": "user", "content": "a new summary"}]
    new = await store.commit_compression(commit(SK, DIGESTS, 8, replacement=replacement))
    found = await store.find_checkpoint(SK, DIGESTS)
    assert found == new and found is not None and found.messages == replacement


async def test_a_deleted_sessions_checkpoints_are_not_kept_in_memory(store: SessionStore) -> None:
    """Deleting a session lets its compressed views go from this process too."""
    replacement = [{"role": "user", "content": "private summary " * 50}]
    await store.commit_compression(commit(SK, DIGESTS, 8, replacement=replacement))
    assert await store.find_checkpoint(SK, DIGESTS) is not None
    assert await store.delete_session(SK, keep_totals=False)
    held = [cp for cp, _ in store._checkpoints._kept.values()]
    assert all(cp.messages != replacement for cp in held)
