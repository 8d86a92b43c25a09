"""The digests of a request's messages (the session's chain, the ledger's history) are taken
only where something needs them: a session whose requests are forwarded as sent hashes none
(the ledger digests a request's messages when a later compressed one asks). httpx -> ctxgate ->
the provider simulator, in this process, so the process's memo of seen messages can be read."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from compression import seen_messages
from tests.proxy.fixtures import proxy_fixture
from tests.servers import ProxyServer
from tests.simulator import Simulator

proxy = proxy_fixture()


def history(turns: int) -> list[dict[str, Any]]:
    """Over 32 KB of JSON: smaller bodies are parsed whole every time (proxy.doors.grown_bodies)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Question {i}: what is {i} squared? " + "Why? " * 800},
            {"role": "assistant", "content": f"{i * i}."},
        ]
    return [*messages, {"role": "user", "content": "And the next one?"}]


def hashed_after(proxy: ProxyServer, body: dict[str, Any], session: str) -> int:
    """Send `body`; the messages this process hashed so far once its charge is recorded."""
    headers = {
        "authorization": "Bearer sk-test",
        "content-type": "application/json",
        "x-session-id": session,
    }
    raw = orjson.dumps(body)
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=raw, headers=headers)
    assert answer.status_code == 200, answer.text
    time.sleep(0.2)  # the charge is recorded once the client has its answer
    hashed: int = seen_messages().hashed
    return hashed


def test_requests_forwarded_as_sent_hash_none_of_their_messages(
    sim: Simulator, proxy: ProxyServer
) -> None:
    messages = history(10)
    body = {"model": "gpt-4o", "messages": messages}
    base = seen_messages().hashed
    assert hashed_after(proxy, body, "s1") == base
    assert hashed_after(proxy, body, "s1") == base  # the identical body
    grown = {"model": "gpt-4o", "messages": [*messages, *history(11)[-3:]]}
    assert hashed_after(proxy, grown, "s1") == base
    assert hashed_after(proxy, {"model": "gpt-4o", "messages": history(4)}, "s2") == base
    assert len(sim.chat_requests) == 4
