"""Leases left by a crashed process of this machine are taken back at once; a live holder, a
holder on another machine and a second holder inside this process are waited for. A request's
lock waits together never exceed its budget."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from storage import SessionKey, SessionLocks, SessionStore, wait_budget
from storage.database.owners import holder_is_dead, new_owner, parse_owner

SK = SessionKey("scope-a", "session-1")
PRINT_OWNER = "from storage.database.owners import new_owner; print(new_owner(), flush=True)"


def dead_owner() -> str:
    """The owner id of a ctxgate-like process that has ended."""
    done = subprocess.run(
        [sys.executable, "-c", PRINT_OWNER], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def live_owner() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The owner id of a process that is still running (killed by the test or at the end)."""
    process = subprocess.Popen(
        [sys.executable, "-c", PRINT_OWNER + "; import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    owner = process.stdout.readline().strip()
    yield owner, process
    process.kill()
    process.wait()


async def timed_hold(locks: SessionLocks, wait_s: float) -> tuple[bool, float]:
    started = time.monotonic()
    async with locks.hold(SK, wait_s=wait_s) as got:
        return got, time.monotonic() - started


async def test_lease_of_a_dead_process_here_is_taken_at_once(store: SessionStore) -> None:
    assert await store.acquire_lease(SK, dead_owner(), ttl_s=30)
    got, waited = await timed_hold(SessionLocks(store, ttl_s=30), wait_s=20)
    assert got
    assert waited < 10  # not the 20 s wait, nor the 30 s expiry


async def test_lease_of_a_live_process_is_waited_for_until_it_ends(
    store: SessionStore, live_owner: tuple[str, subprocess.Popen[str]]
) -> None:
    owner, process = live_owner
    assert await store.acquire_lease(SK, owner, ttl_s=30)
    locks = SessionLocks(store, ttl_s=30)
    got, waited = await timed_hold(locks, wait_s=0.3)
    assert not got and waited >= 0.25
    process.kill()
    process.wait()
    got, waited = await timed_hold(locks, wait_s=20)
    assert got and waited < 10  # not the 20 s wait


async def test_holders_that_cannot_be_judged_are_waited_for(store: SessionStore) -> None:
    me = parse_owner(str(new_owner()))
    assert me is not None
    elsewhere = dataclasses.replace(me, host="other-host", pid=999_999)
    for holder in (str(elsewhere), "worker-7", "0123456789abcdef"):
        await store.release_lease(SK, holder)
        assert await store.acquire_lease(SK, holder, ttl_s=30)
        got, _ = await timed_hold(SessionLocks(store, ttl_s=30), wait_s=0.2)
        assert not got, holder
        await store.release_lease(SK, holder)


async def test_two_lock_sets_of_one_process_exclude_each_other(store: SessionStore) -> None:
    first, second = SessionLocks(store), SessionLocks(store)
    async with first.hold(SK) as got:
        assert got
        got, waited = await timed_hold(second, wait_s=0.2)
        assert not got and waited >= 0.15


def test_a_predecessor_with_our_pid_is_dead() -> None:
    """A restarted container runs ctxgate as PID 1 again: same PID, another process."""
    me = new_owner()
    predecessor = dataclasses.replace(me, nonce="0000deadbeef")
    assert holder_is_dead(str(predecessor), me)
    assert not holder_is_dead(str(me), me)


def test_a_reused_pid_is_told_apart_by_its_start_time(
    live_owner: tuple[str, subprocess.Popen[str]],
) -> None:
    me = new_owner()
    holder = parse_owner(live_owner[0])
    assert holder is not None and holder.start
    assert not holder_is_dead(str(holder), me)
    reused = dataclasses.replace(holder, start=str(int(holder.start) - 1))
    assert holder_is_dead(str(reused), me)


async def test_start_up_frees_only_the_leases_of_dead_processes(
    store: SessionStore, live_owner: tuple[str, subprocess.Popen[str]]
) -> None:
    dead = dead_owner()
    keys = [SessionKey("s", f"k{i}") for i in range(4)]
    for sk, holder in zip(keys, [dead, dead, live_owner[0], "worker-7"], strict=True):
        assert await store.acquire_lease(sk, holder, ttl_s=30)
    assert await SessionLocks(store).release_dead_holders() == 2
    assert sorted(await store.lease_owners()) == sorted([live_owner[0], "worker-7"])


async def test_a_request_never_waits_longer_than_its_budget(store: SessionStore) -> None:
    assert await store.acquire_lease(SK, "worker-7", ttl_s=30)
    locks = SessionLocks(store, ttl_s=30)
    started = time.monotonic()
    with wait_budget(0.5):
        for _ in range(3):  # arrival, then two overflow retries, each allowed 1 s alone
            got, _ = await timed_hold(locks, wait_s=1.0)
            assert not got
    assert time.monotonic() - started < 2.0  # not 3 s


async def test_a_task_started_inside_a_budget_keeps_its_own_wait(store: SessionStore) -> None:
    assert await store.acquire_lease(SK, "worker-7", ttl_s=30)
    locks = SessionLocks(store, ttl_s=30)
    with wait_budget(0.0):
        background = asyncio.create_task(timed_hold(locks, wait_s=0.4))
    got, waited = await background
    assert not got and waited >= 0.35
