"""The in-process session cache answers what the database would, for this process's writes."""

import dataclasses

from storage import PROMPT_TOKENS_PENDING, SessionKey, SessionStore, UsageRecord
from storage.cache import Unwritten, with_usage
from tests.storage.factories import FakeClock, chain_digests, commit, history

SK = SessionKey("scope-a", "cached")


def _comparable(record: object) -> object:
    # created_at/updated_at are write times in the database, usage times in the cache.
    if record is None:
        return None
    return dataclasses.replace(record, created_at=0.0, updated_at=0.0)  # type: ignore[type-var]


async def test_cached_rows_match_the_database_after_usage(
    sqlite_url: str, clock: FakeClock
) -> None:
    cached = await SessionStore.open(sqlite_url, clock=clock, session_cache_s=3600)
    plain = await SessionStore.open(sqlite_url, clock=clock)
    try:
        assert await cached.get_session(SK) is None  # caches "no such session"
        late = clock() - 5  # older than the usage below: only bumps the counters
        for i, at in enumerate([clock() + 1, clock() + 2, late, clock() + 3]):
            cached.record_usage_later(UsageRecord(SK, "gpt-test", 1000 + i, 7, 3 + i, at=at))
            from_cache = await cached.get_session(SK)
            await cached.flush()
            assert _comparable(from_cache) == _comparable(await plain.get_session(SK))
        await cached.save_engine_state(SK, {"strikes": 1})
        assert (await cached.get_session(SK)).engine_state == {"strikes": 1}  # type: ignore[union-attr]
    finally:
        await cached.close()
        await plain.close()


async def test_no_cache_reads_the_database_every_time(sqlite_url: str, clock: FakeClock) -> None:
    writer = await SessionStore.open(sqlite_url, clock=clock)
    reader = await SessionStore.open(sqlite_url, clock=clock)
    try:
        assert await reader.get_session(SK) is None
        await writer.record_usage(UsageRecord(SK, "gpt-test", 500, 5, 2, at=clock()))
        assert (await reader.get_session(SK)).last_prompt_tokens == 500  # type: ignore[union-attr]
    finally:
        await writer.close()
        await reader.close()


async def test_a_row_read_back_shows_the_usage_still_in_the_write_behind(
    store_url: str, clock: FakeClock
) -> None:
    """Another write drops the session's copy while its usage lingers in the write-behind:
    the row read back from the database is brought up to that usage, as the copy was, and
    once the usage is written it is counted once."""
    for cache_s in (3600.0, 0.0):
        sk = SessionKey("scope-a", f"lingering-{cache_s:g}")
        store = await SessionStore.open(
            store_url, clock=clock, session_cache_s=cache_s, linger_s=60
        )
        plain = await SessionStore.open(store_url, clock=clock)
        try:
            await store.save_engine_state(sk, {"strikes": 0})
            assert await store.get_session(sk) is not None  # the copy, where there is one
            store.record_usage_later(UsageRecord(sk, "gpt-test", 6500, 7, 12, at=clock() + 1))
            await store.save_engine_state(sk, {"strikes": 1})  # drops the copy
            lingering = await store.get_session(sk)
            assert lingering is not None and lingering.engine_state == {"strikes": 1}
            assert (lingering.last_prompt_tokens, lingering.last_message_count) == (6500, 12)
            assert lingering.request_count == 0  # the totals count it once it is written
            await store.flush()
            written = await store.get_session(sk)
            assert _comparable(written) == _comparable(await plain.get_session(sk))
            assert written is not None and written.request_count == 1
        finally:
            await store.close()
            await plain.close()


async def test_usage_older_than_a_compression_does_not_hide_its_pending_figure(
    sqlite_url: str, clock: FakeClock
) -> None:
    """A compression after the usage marks the real figure pending; the usage still in the
    write-behind must not read back as the newest figure (the database would not store it so)."""
    sk = SessionKey("scope-a", "compressed")
    store = await SessionStore.open(sqlite_url, clock=clock, session_cache_s=3600, linger_s=60)
    try:
        messages = history(6)
        await store.save_engine_state(sk, {})
        store.record_usage_later(UsageRecord(sk, "gpt-test", 6500, 7, 6, at=clock()))
        clock.advance(1)
        await store.commit_compression(commit(sk, chain_digests(messages), 4))
        row = await store.get_session(sk)
        assert row is not None and row.last_prompt_tokens == PROMPT_TOKENS_PENDING
        await store.flush()
        row = await store.get_session(sk)
        assert row is not None and row.last_prompt_tokens == PROMPT_TOKENS_PENDING
        assert row.request_count == 1
    finally:
        await store.close()


def test_records_already_in_the_row_read_are_not_counted_again() -> None:
    """A batch written but not yet let go of when the row is read: the row counts its
    records, and bringing it up to them must not count them twice (nor undo a newer one)."""
    sk = SessionKey("scope-a", "in-flight")
    first = UsageRecord(sk, "gpt-test", 100, 5, 4, at=1.0)
    second = UsageRecord(sk, "gpt-test", 200, 5, 6, at=2.0)
    row = with_usage(with_usage(None, first), second)  # what the database holds
    unwritten = Unwritten()
    unwritten.add(first)
    unwritten.add(second)
    for earlier in ([], [first, second], [second]):
        seen = unwritten.over(row, sk, earlier)
        assert seen is not None
        assert (seen.request_count, seen.total_prompt_tokens) == (2, 300)
        assert (seen.last_prompt_tokens, seen.last_message_count) == (200, 6)
    older = UsageRecord(sk, "gpt-test", 50, 5, 2, at=0.5)  # answered before the row's last
    unwritten.add(older)
    seen = unwritten.over(row, sk, [])
    assert seen is not None and (seen.last_prompt_tokens, seen.request_count) == (200, 2)
