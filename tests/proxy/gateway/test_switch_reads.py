"""A session's compression switch is read from the store only where some session has one:
while none has, a session this process has not seen costs no read of its own, and a switch set
on another replica is still seen within `storage.session_cache_s`. Two `Switches` (two
replicas) on one SQLite file, on a clock the test moves."""

from __future__ import annotations

from proxy.gateway.switches import Switches
from storage import SessionKey, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def key(name: str) -> SessionKey:
    return SessionKey("scope", name)


async def test_new_sessions_cost_no_read_while_no_switch_is_off(store: SessionStore) -> None:
    clock = Clock()
    here, there = Switches(store, 1.0, clock), Switches(store, 1.0, clock)
    for i in range(50):
        assert not await here.compression_off(key(f"new-{i}"), {})
    assert here.reads == 1  # the whole table's, once
    # Switched off on the other replica: seen here within a second, as a session's own is.
    assert await there.compression_off(key("quiet"), {"x-ctxgate-compression": "off"})
    clock.now += 1.0
    assert await here.compression_off(key("quiet"), {})
    assert not await here.compression_off(key("other"), {})
    # Switched off here: this process knows at once that some session is off.
    assert await here.compression_off(key("loud"), {"x-ctxgate-compression": "off"})
    reads = here.reads
    assert not await here.compression_off(key("another"), {})
    assert here.reads == reads + 1  # its own switch read
    assert await there.compression_off(key("loud"), {})


async def test_without_a_cache_every_session_reads_its_own(store: SessionStore) -> None:
    clock = Clock()
    here, there = Switches(store, 0.0, clock), Switches(store, 0.0, clock)
    assert not await here.compression_off(key("s"), {})
    await there.set(key("s"), True)
    assert await here.compression_off(key("s"), {})
    await there.set(key("s"), False)
    assert not await here.compression_off(key("s"), {})
