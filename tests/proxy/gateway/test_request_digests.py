"""The digests of a request's messages (the session's chain, the ledger's history): hashed
once per message a session sends, not once per request. httpx -> ctxgate -> the provider
simulator, in this process, so the process's memo of seen messages can be read."""

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


def hashed_after(proxy: ProxyServer, body: dict[str, Any], session: str, at_least: int) -> int:
    """Send `body`; the messages this process hashed so far once its charge is recorded."""
    headers = {
        "authorization": "Bearer sk-test",
        "content-type": "application/json",
        "x-session-id": session,
    }
    # Compact JSON, as SDKs send it: a body parsed before is then reused, message by message.
    raw = orjson.dumps(body)
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=raw, headers=headers)
    assert answer.status_code == 200, answer.text
    memo = seen_messages()
    deadline = time.monotonic() + 10
    while memo.hashed < at_least and time.monotonic() < deadline:
        time.sleep(0.01)  # the charge is recorded once the client has its answer
    time.sleep(0.05)  # and nothing more is hashed after it
    hashed: int = memo.hashed
    return hashed


def test_a_session_repeating_or_growing_its_body_hashes_only_new_messages(
    sim: Simulator, proxy: ProxyServer
) -> None:
    messages = history(10)
    body = {"model": "gpt-4o", "messages": messages}
    base = seen_messages().hashed
    assert hashed_after(proxy, body, "s1", base + len(messages)) - base == len(messages)
    # The identical body: its messages are the ones parsed before, their digests kept.
    assert hashed_after(proxy, body, "s1", base + len(messages)) - base == len(messages)
    grown = {"model": "gpt-4o", "messages": [*messages, *history(11)[-3:]]}
    after = hashed_after(proxy, grown, "s1", base + len(messages) + 3)
    assert after - base == len(messages) + 3
    assert len(sim.chat_requests) == 3
