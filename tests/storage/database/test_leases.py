import asyncio

from storage import SessionKey, SessionStore
from tests.storage.factories import FakeClock

SK = SessionKey("scope-a", "session-1")


async def test_acquire_and_contend(store: SessionStore) -> None:
    assert await store.acquire_lease(SK, "worker-1", ttl_s=30)
    assert not await store.acquire_lease(SK, "worker-2", ttl_s=30)
    assert await store.acquire_lease(SK, "worker-1", ttl_s=30)  # our own: re-acquire extends
    assert await store.acquire_lease(SessionKey("scope-a", "other"), "worker-2", ttl_s=30)
    assert await store.acquire_lease(SessionKey("scope-b", SK.key), "worker-2", ttl_s=30)


async def test_expired_lease_is_taken_over(store: SessionStore, clock: FakeClock) -> None:
    assert await store.acquire_lease(SK, "crashed", ttl_s=30)
    clock.advance(29.9)
    assert not await store.acquire_lease(SK, "worker-2", ttl_s=30)
    clock.advance(0.1)
    assert await store.acquire_lease(SK, "worker-2", ttl_s=30)
    assert not await store.refresh_lease(SK, "crashed", ttl_s=30)


async def test_refresh_extends_only_our_lease(store: SessionStore, clock: FakeClock) -> None:
    assert await store.acquire_lease(SK, "worker-1", ttl_s=30)
    clock.advance(25)
    assert await store.refresh_lease(SK, "worker-1", ttl_s=30)
    clock.advance(25)  # 50 s after taking it, 25 s after the refresh
    assert not await store.acquire_lease(SK, "worker-2", ttl_s=30)
    assert not await store.refresh_lease(SK, "worker-2", ttl_s=30)


async def test_release(store: SessionStore) -> None:
    assert await store.acquire_lease(SK, "worker-1", ttl_s=30)
    await store.release_lease(SK, "worker-2")  # not the owner: no effect
    assert not await store.acquire_lease(SK, "worker-2", ttl_s=30)
    await store.release_lease(SK, "worker-1")
    assert not await store.refresh_lease(SK, "worker-1", ttl_s=30)
    assert await store.acquire_lease(SK, "worker-2", ttl_s=30)


async def test_two_stores_race_for_one_lease(store_url: str, clock: FakeClock) -> None:
    # Two engines on one database stand in for two worker processes.
    a = await SessionStore.open(store_url, clock=clock)
    b = await SessionStore.open(store_url, clock=clock)
    try:
        for round_ in range(5):
            sk = SessionKey("scope-a", f"race-{round_}")
            attempts = [
                store.acquire_lease(sk, f"{name}-{i}", ttl_s=30)
                for i in range(10)
                for store, name in ((a, "a"), (b, "b"))
            ]
            assert sum(await asyncio.gather(*attempts)) == 1
    finally:
        await a.close()
        await b.close()
