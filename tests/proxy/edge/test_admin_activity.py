"""GET /admin/sessions/{scope}/{id}/activity: whether a background compression of the session is
pending (an answer is out, the bookkeeping that decides on one has not run) or running.

A client that waits for `idle` before its next request (bench/eval.py does) sees what the
compression left behind."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from session.identity import scope_for
from storage import SessionKey
from tests.proxy.agent_loop import AgentLoop
from tests.proxy.edge.test_admin import ADMIN, AGENT_KEY, MODEL, MODELS, client, root, session_url
from tests.servers import ProxyServer, settings_for
from tests.simulator import Hang, Reply, Simulator, is_summary_request

SESSION = "team/agent two?#"
SCOPE = scope_for(AGENT_KEY)


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    settings = settings_for(
        sim.base_url,
        db_path,
        models=MODELS,
        # The agent threshold at half the window: background compressions come well before
        # the 85% line that would compress while the client waits.
        compression={"background": True, "options": {"min_threshold_tokens": 4096}},
        auth={"admin_key": "adm"},
    )
    with ProxyServer(settings) as server:
        yield server


def activity(proxy: ProxyServer, key: str = SESSION) -> str:
    answer = httpx.get(session_url(proxy, SCOPE, key, "/activity"), headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "session_activity"
    assert (body["scope"], body["key"]) == (SCOPE, key)
    state = body["background"]
    assert state in ("idle", "pending", "running")
    return str(state)


def settled(proxy: ProxyServer, until: Callable[[str], bool], within_s: float = 10.0) -> str:
    deadline = time.monotonic() + within_s
    state = activity(proxy)
    while not until(state):
        assert time.monotonic() < deadline, f"still {state}"
        time.sleep(0.01)
        state = activity(proxy)
    return state


def post_response_events(proxy: ProxyServer, within_s: float = 5.0) -> list[str]:
    """The session's stored post-response events, once its row is stored (the write-behind
    writes a new session's row a moment after its first answers)."""
    deadline = time.monotonic() + within_s
    detail = proxy.run(proxy.services.store.session_detail(SessionKey(SCOPE, SESSION)))
    while detail is None and time.monotonic() < deadline:
        time.sleep(0.02)
        detail = proxy.run(proxy.services.store.session_detail(SessionKey(SCOPE, SESSION)))
    assert detail is not None
    return [e.outcome for e in detail.events if e.trigger == "post_response"]


def test_a_held_background_compression_is_running_until_it_lands(
    sim: Simulator, proxy: ProxyServer
) -> None:
    loop = AgentLoop(client(proxy), MODEL, session_id=SESSION)
    loop.script(sim)
    scripted = sim.responder
    assert scripted is not None
    gate = threading.Event()

    async def respond(body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            await asyncio.to_thread(gate.wait, 30)  # the summary model answers when let
            return None
        return scripted(body)

    sim.responder = respond
    try:
        state = "idle"
        for step in range(60):
            loop.step(step)
            state = settled(proxy, lambda s: s != "pending")
            if state == "running":
                break
        assert state == "running", "no background compression started"
        assert any(r.is_summary for r in sim.received)
        time.sleep(0.2)
        assert activity(proxy) == "running"  # the summary is held: nothing has landed
        assert post_response_events(proxy) == []
    finally:
        gate.set()
    settled(proxy, lambda s: s == "idle")
    # Idle once its outcome is stored (the simulator's own summary may overrun its budget and
    # be rejected: what counts here is that it has landed).
    assert len(post_response_events(proxy)) == 1


def test_a_stream_still_going_out_is_pending_then_idle(sim: Simulator, proxy: ProxyServer) -> None:
    sim.enqueue(Hang(seconds=1.0, after_chunks=1, then=Reply(content="one two three four five")))
    assert activity(proxy) == "idle"  # a session never seen: nothing runs for it
    body = {
        "model": MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
    }
    headers = {"authorization": f"Bearer {AGENT_KEY}", "x-session-id": SESSION}
    seen: list[str] = []
    with httpx.stream(
        "POST", f"{root(proxy)}/v1/chat/completions", json=body, headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: ") and not seen:
                # The answer is out, its end (and the bookkeeping after it) is not.
                seen.append(activity(proxy))
    assert seen == ["pending"]
    assert settled(proxy, lambda s: s == "idle") == "idle"  # no compression was due
