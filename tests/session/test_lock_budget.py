"""However many compressions a request tries (on arrival, then after each overflow), its waits
for a session lock held elsewhere add up to at most `storage.lock_wait_s`."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from session.identity import scope_for
from storage import SessionKey, SessionStore
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator


async def hold_lease(url: str, sk: SessionKey) -> None:
    store = await SessionStore.open(url)
    try:
        assert await store.acquire_lease(sk, "another-replica", ttl_s=300)
    finally:
        await store.close()


def test_lock_waits_of_one_request_share_one_bound(sim: Simulator, db_path: str) -> None:
    settings = settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "small-8k", "upstream": "sim", "context_length": 8192}],
        storage={"lock_wait_s": 3},
        compression={"max_attempts": 3},
    )
    asyncio.run(hold_lease(settings.storage.url, SessionKey(scope_for("sk-client"), "busy")))
    history = [{"role": "user", "content": f"part {i}: " + "word " * 400} for i in range(25)]
    with ProxyServer(settings) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError):  # over the window, and nothing may compress
            client.chat.completions.create(
                model="small-8k", messages=history, extra_headers={"x-session-id": "busy"}
            )
        waited = time.monotonic() - started
    # Two compressions wanted the lock (on arrival over the hygiene line, then to recover from
    # the overflow): 6 s of waiting if each had its own 3 s.
    assert waited < 3 + 2.0, f"{waited:.1f} s: the lock waits were not bounded together"
