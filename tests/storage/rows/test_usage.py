import time

from storage import PROMPT_TOKENS_PENDING, SessionKey, SessionStore, UsageRecord
from tests.storage.factories import FakeClock, chain_digests, commit, history

SK = SessionKey("scope-a", "session-1")


def usage(
    i: int,
    *,
    sk: SessionKey = SK,
    at: float | None = None,
    prompt_tokens: int | None = None,
    estimated: bool = False,
) -> UsageRecord:
    tokens = 1000 + i if prompt_tokens is None else prompt_tokens
    return UsageRecord(sk, "gpt-test", tokens, 10, i + 1, at=at, estimated=estimated)


async def test_write_behind_of_1000_records(store: SessionStore, clock: FakeClock) -> None:
    started = time.perf_counter()
    for i in range(1000):
        clock.advance(0.001)
        store.record_usage_later(usage(i))
    await store.flush()
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"\n1000 x record_usage_later + flush on {store.dialect}: {elapsed_ms:.1f} ms")

    s = await store.get_session(SK)
    assert s is not None
    assert (s.request_count, s.total_prompt_tokens, s.total_completion_tokens) == (
        1000,
        sum(1000 + i for i in range(1000)),
        10_000,
    )
    assert (s.last_prompt_tokens, s.last_message_count, s.model) == (1999, 1000, "gpt-test")
    assert store.stats.usage_written == 1000 and store.stats.usage_pending == 0
    detail = await store.session_detail(SK)
    assert detail is not None and len(detail.usage) == 1000
    assert [p.prompt_tokens for p in detail.usage[:3]] == [1000, 1001, 1002]


async def test_records_of_many_sessions_in_one_batch(store: SessionStore) -> None:
    keys = [SessionKey("scope-a", f"s{n}") for n in range(10)]
    for i in range(100):
        for sk in keys:
            store.record_usage_later(usage(i, sk=sk, at=1000.0 + i))
    await store.flush()
    for sk in keys:
        s = await store.get_session(sk)
        assert s is not None and (s.request_count, s.last_prompt_tokens) == (100, 1099)


async def test_record_usage_awaited_and_estimated_flag(store: SessionStore) -> None:
    await store.record_usage(usage(0, estimated=True))
    s = await store.get_session(SK)
    assert s is not None and s.last_usage_estimated and s.last_prompt_tokens == 1000
    detail = await store.session_detail(SK)
    assert detail is not None and detail.usage[0].estimated


async def test_late_usage_keeps_the_newer_figure(store: SessionStore) -> None:
    await store.record_usage(usage(5, at=2000.0))
    await store.record_usage(usage(1, at=1000.0))  # arrives late, counted but not "last"
    s = await store.get_session(SK)
    assert s is not None and (s.last_prompt_tokens, s.request_count) == (1005, 2)


async def test_usage_from_before_a_compression_keeps_the_pending_sentinel(
    store: SessionStore, clock: FakeClock
) -> None:
    digests = chain_digests(history(10))
    await store.commit_compression(commit(SK, digests, 8))
    store.record_usage_later(usage(0, at=clock() - 1))  # the write-behind lands late
    await store.flush()
    s = await store.get_session(SK)
    assert s is not None
    assert s.last_prompt_tokens == PROMPT_TOKENS_PENDING and s.request_count == 1
    await store.record_usage(usage(7, at=clock() + 1))
    s = await store.get_session(SK)
    assert s is not None and s.last_prompt_tokens == 1007


async def test_a_bad_record_does_not_cost_its_batch(store: SessionStore) -> None:
    store.record_usage_later(usage(0))
    store.record_usage_later(usage(1, prompt_tokens=2**80))  # no 64-bit column holds it
    store.record_usage_later(usage(2))
    await store.flush()
    s = await store.get_session(SK)
    assert s is not None and s.request_count == 2
    assert store.stats.usage_failed == 1


async def test_record_usage_later_after_close_is_dropped_quietly(store_url: str) -> None:
    store = await SessionStore.open(store_url)
    await store.close()
    store.record_usage_later(usage(0))
    await store.flush()
    assert store.stats.usage_dropped == 1


async def test_close_writes_pending_usage(store_url: str) -> None:
    store = await SessionStore.open(store_url)
    for i in range(50):
        store.record_usage_later(usage(i))
    await store.close()
    reopened = await SessionStore.open(store_url)
    s = await reopened.get_session(SK)
    await reopened.close()
    assert s is not None and s.request_count == 50
