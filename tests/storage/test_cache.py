"""The in-process session cache answers what the database would, for this process's writes."""

import dataclasses

from storage import SessionKey, SessionStore, UsageRecord
from tests.storage.factories import FakeClock

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
