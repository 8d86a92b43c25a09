import asyncio
import sqlite3

import pytest
from sqlalchemy import select

from storage import LockTimeout, SessionKey, SessionLocks, SessionStore
from storage.database.db import Database
from storage.database.tables import leases
from tests.storage.factories import FakeClock

SK = SessionKey("scope-a", "session-1")


async def test_second_task_waits_for_the_first(store: SessionStore) -> None:
    locks = SessionLocks(store, ttl_s=30)
    trace: list[str] = []
    first_in, let_go = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with locks.hold(SK) as got:
            trace.append(f"first {got}")
            first_in.set()
            await let_go.wait()
            trace.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with locks.hold(SK, wait_s=60) as got:
            trace.append(f"second {got}")

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await first_in.wait()
    for _ in range(5):
        await asyncio.sleep(0.01)
    assert trace == ["first True"] and locks.keys_in_use == 1
    let_go.set()
    await asyncio.gather(*tasks)
    assert trace == ["first True", "first out", "second True"]
    assert locks.keys_in_use == 0


async def test_wait_timeout_yields_false(store: SessionStore) -> None:
    locks = SessionLocks(store)
    async with locks.hold(SK) as got:
        assert got
        async with locks.hold(SK, wait_s=0.05) as second:
            assert second is False
        async with locks.hold(SK, wait_s=0) as third:
            assert third is False
        with pytest.raises(LockTimeout):
            async with locks.require(SK, wait_s=0):
                pass
        async with locks.hold(SessionKey("scope-a", "other"), wait_s=0) as other:
            assert other  # other sessions are not blocked
    assert locks.keys_in_use == 0


async def test_released_when_the_body_fails(store: SessionStore) -> None:
    locks, elsewhere = SessionLocks(store), SessionLocks(store, owner="other-worker")
    with pytest.raises(RuntimeError):
        async with locks.hold(SK):
            raise RuntimeError("compression blew up")
    async with elsewhere.hold(SK, wait_s=0) as got:
        assert got
    assert locks.keys_in_use == elsewhere.keys_in_use == 0


async def test_released_when_cancelled_holding_or_waiting(store: SessionStore) -> None:
    locks = SessionLocks(store)
    holding = asyncio.Event()

    async def hold_forever() -> None:
        async with locks.hold(SK):
            holding.set()
            await asyncio.Event().wait()

    async def wait_forever() -> None:
        async with locks.hold(SK, wait_s=3600):
            pytest.fail("must not get the lock")

    holder = asyncio.create_task(hold_forever())
    await holding.wait()
    waiter = asyncio.create_task(wait_forever())
    await asyncio.sleep(0.01)
    for task in (waiter, holder):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert locks.keys_in_use == 0
    async with SessionLocks(store, owner="other-worker").hold(SK, wait_s=0) as got:
        assert got


async def test_two_stores_contend_through_the_lease(store_url: str, clock: FakeClock) -> None:
    a = await SessionStore.open(store_url, clock=clock)
    b = await SessionStore.open(store_url, clock=clock)
    try:
        locks_a, locks_b = SessionLocks(a), SessionLocks(b)
        async with locks_a.hold(SK) as got_a:
            assert got_a
            async with locks_b.hold(SK, wait_s=0.1) as got_b:
                assert got_b is False
        async with locks_b.hold(SK, wait_s=0) as got_b:
            assert got_b
    finally:
        await a.close()
        await b.close()


async def _lease_expiry(url: str) -> float:
    db = Database.connect(url)
    try:
        result = await db.read(lambda conn: conn.execute(select(leases.c.expires_at)))
        return float(result.scalar_one())
    finally:
        await db.dispose()


async def test_lease_is_refreshed_while_held(
    store: SessionStore, store_url: str, clock: FakeClock
) -> None:
    locks = SessionLocks(store, ttl_s=0.3)  # refreshed every 0.1 s of real time
    async with locks.hold(SK) as got:
        assert got
        clock.advance(60)  # the store's clock says the lease has long expired
        for _ in range(200):
            if await _lease_expiry(store_url) > clock():
                break
            await asyncio.sleep(0.02)
        assert not await store.acquire_lease(SK, "intruder", ttl_s=30)
    assert locks.leases_lost == 0


async def test_database_trouble_means_no_lock_not_an_error(sqlite_url: str) -> None:
    store = await SessionStore.open(sqlite_url)
    try:
        with sqlite3.connect(sqlite_url.split("///", 1)[1]) as raw:
            raw.execute("DROP TABLE leases")
        async with SessionLocks(store).hold(SK, wait_s=1) as got:
            assert got is False
    finally:
        await store.close()


async def test_cancelled_while_polling_for_the_lease(store: SessionStore) -> None:
    locks, elsewhere = SessionLocks(store, poll_s=0.01), SessionLocks(store, owner="other-worker")
    async with elsewhere.hold(SK) as got:
        assert got
        waiter = asyncio.create_task(locks.hold(SK, wait_s=3600).__aenter__())
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert locks.keys_in_use == 0
    async with locks.hold(SK, wait_s=0) as got:
        assert got
