import pytest

from storage import SessionKey, SessionStore, UsageRecord
from tests.storage.factories import FakeClock, chain_digests, commit, event, history, row_counts

SK = SessionKey("scope-a", "session-1")


async def test_unknown_session(store: SessionStore) -> None:
    assert await store.get_session(SK) is None
    assert await store.session_detail(SK) is None
    assert await store.archived_messages(SK) == []
    assert await store.delete_session(SK) is False


async def test_engine_state_creates_the_session_and_replaces_state(
    store: SessionStore, clock: FakeClock
) -> None:
    await store.save_engine_state(SK, {"strikes": 1, "summary": "prévious ✓"})
    s = await store.get_session(SK)
    assert s is not None
    assert (s.engine_state, s.created_at, s.request_count, s.model) == (
        {"strikes": 1, "summary": "prévious ✓"},
        clock(),
        0,
        "",
    )
    await store.record_usage(UsageRecord(SK, "gpt-test", 5000, 10, 3))
    await store.save_engine_state(SK, {"strikes": 2})
    s = await store.get_session(SK)
    assert s is not None and (s.engine_state, s.last_prompt_tokens) == ({"strikes": 2}, 5000)
    await store.save_engine_state(SK, {}, last_prompt_tokens=None)
    s = await store.get_session(SK)
    assert s is not None and s.last_prompt_tokens is None and s.engine_state == {}


async def test_list_sessions_by_activity_and_tokens(store: SessionStore, clock: FakeClock) -> None:
    for n, tokens in enumerate([300, 100, 200]):
        clock.advance(1)
        await store.record_usage(UsageRecord(SessionKey("scope-a", f"s{n}"), "m", tokens, 1, 1))
    clock.advance(1)
    await store.record_usage(UsageRecord(SessionKey("scope-b", "other"), "m", 999, 1, 1))

    by_activity = await store.list_sessions(scope="scope-a")
    assert [s.key for s in by_activity] == ["s2", "s1", "s0"]
    by_tokens = await store.list_sessions(scope="scope-a", order="tokens")
    assert [s.key for s in by_tokens] == ["s0", "s2", "s1"]
    page = await store.list_sessions(limit=2, offset=1)
    assert [s.key for s in page] == ["s2", "s1"]
    assert len(await store.list_sessions()) == 4


async def test_session_detail(store: SessionStore, clock: FakeClock) -> None:
    digests = chain_digests(history(10))
    for i in range(5):
        clock.advance(1)
        await store.record_usage(UsageRecord(SK, "m", 100 * i, 1, i + 1, estimated=i == 4))
    cp = await store.commit_compression(commit(SK, digests, 6, archived=[(0, history(1)[0])]))
    clock.advance(1)
    await store.add_event(event(SK, outcome="noop", tokens_after=1000))
    detail = await store.session_detail(SK, max_points=3)
    assert detail is not None
    assert detail.session.compression_count == 1 and detail.archived_count == 1
    assert [(e.outcome, e.checkpoint_id) for e in detail.events] == [("ok", cp.id), ("noop", None)]
    assert [c.id for c in detail.checkpoints] == [cp.id]
    assert [(p.prompt_tokens, p.estimated) for p in detail.usage] == [
        (200, False),
        (300, False),
        (400, True),
    ]


async def test_delete_cascades_to_everything_of_the_session(
    store: SessionStore, store_url: str
) -> None:
    keep = SessionKey("scope-a", "keep")
    digests = chain_digests(history(10))
    for sk in (SK, keep):
        await store.record_usage(UsageRecord(sk, "m", 100, 1, 1))
        await store.commit_compression(commit(sk, digests, 6, archived=[(0, history(1)[0])]))
        await store.add_event(event(sk, outcome="failed"))
        await store.acquire_lease(sk, "owner", 30)
    before = await row_counts(store_url)

    assert await store.delete_session(SK) is True
    after = await row_counts(store_url)
    assert await store.get_session(SK) is None and await store.find_checkpoint(SK, digests) is None
    for table in ("sessions", "checkpoints", "archived_messages", "usage", "leases"):
        assert after[table] == before[table] - 1 == 1, table
    assert after["events"] == before["events"] - 2 == 2
    assert await store.find_checkpoint(keep, digests) is not None


async def test_model_windows(store: SessionStore) -> None:
    assert await store.get_model_windows() == {}
    await store.set_model_window("gpt-test", 128_000)
    await store.set_model_window("local/llama", 8192)
    await store.set_model_window("gpt-test", 100_000)
    assert await store.get_model_windows() == {"gpt-test": 100_000, "local/llama": 8192}


async def test_ping(store: SessionStore) -> None:
    await store.ping()


@pytest.mark.parametrize("order", ["last_activity", "tokens"])
async def test_list_sessions_empty(store: SessionStore, order: str) -> None:
    assert await store.list_sessions(order=order) == []  # type: ignore[arg-type]
