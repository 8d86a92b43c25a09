"""Session paths: background compression, forks, rotation, the manual API, failing summaries."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import orjson
import pytest

from compression import check_invariants
from session.identity import scope_for
from session.memory import HeldTurn
from storage import SessionKey
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import Fail, Hang, ModelSpec, Reply, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture

MODEL = "agent-32k"
WINDOW = 32768
# Agent threshold 16K, hygiene 27.8K: the background path has room to work before hygiene.
EARLY = {"options": {"min_threshold_tokens": 1000}}


sim32k = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def make_settings(sim: Simulator, db_path: str, **compression: Any) -> Any:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    return settings_for(sim.base_url, db_path, models=models, compression={**EARLY, **compression})


def make_client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)


def grow_until(loop: AgentLoop, sim: Simulator, prompt_tokens: int) -> int:
    step = 0
    while not sim.chat_requests or (sim.chat_requests[-1].prompt_tokens or 0) < prompt_tokens:
        loop.step(step)
        step += 1
        assert step < 200
    return step


def grow_until_compressed(loop: AgentLoop) -> None:
    step = 0
    while "true" not in loop.compressed_headers:
        loop.step(step)
        step += 1
        assert step < 200


def detail(proxy: ProxyServer, session: str) -> Any:
    return proxy.run(
        proxy.services.store.session_detail(SessionKey(scope_for("sk-agent"), session))
    )


def wait_for_event(proxy: ProxyServer, session: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = detail(proxy, session)
        if found is not None and found.events:
            return found
        time.sleep(0.05)
    raise TimeoutError("no compression event")


def test_background_compression_prepares_the_next_request(sim32k: Simulator, db_path: str) -> None:
    with ProxyServer(make_settings(sim32k, db_path)) as proxy:
        loop = AgentLoop(make_client(proxy), MODEL, session_id="bg", file_lines=60)
        loop.script(sim32k)
        step = grow_until(loop, sim32k, 16_500)
        found = wait_for_event(proxy, "bg")
        assert [e.trigger for e in found.events] == ["post_response"]
        before = len(sim32k.chat_requests)
        loop.step(step)
    ordinary = [r for r in sim32k.chat_requests[before:] if not r.is_summary]
    assert loop.compressed_headers[-1] == "true"
    assert ordinary[-1].prompt_tokens < 16_500
    check_invariants(ordinary[-1].body["messages"])


def test_regeneration_and_fork_each_get_a_correct_view(sim32k: Simulator, db_path: str) -> None:
    with ProxyServer(make_settings(sim32k, db_path, background=False)) as proxy:
        loop = AgentLoop(make_client(proxy), MODEL, session_id="fork", file_lines=60)
        loop.script(sim32k)
        grow_until_compressed(loop)  # preflight: no background path
        client = make_client(proxy)
        headers = {"X-Session-Id": "fork"}
        # Regeneration: the same history again uses the same checkpoint.
        again = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=loop.messages, extra_headers=headers
        )
        regenerated_checkpoint = again.headers["x-ctxgate-checkpoint"]
        regenerated = sim32k.chat_requests[-1].body["messages"]
        assert len(regenerated) < len(loop.messages)
        # Fork: an edited early user message matches no checkpoint, so the full history goes.
        forked = [dict(m) for m in loop.messages]
        forked[1]["content"] = "A different task altogether."
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=forked, extra_headers=headers
        )
    forwarded = str([r for r in sim32k.chat_requests if not r.is_summary][-1].body["messages"])
    # The fork may be compressed on its own (it is over the threshold), never with the
    # original conversation's checkpoint or summary.
    assert "A different task altogether." in forwarded
    assert loop.messages[1]["content"] not in forwarded
    assert raw.headers.get("x-ctxgate-checkpoint") != regenerated_checkpoint


def test_rotation_moves_the_session_to_a_linked_child(sim32k: Simulator, db_path: str) -> None:
    settings = settings_for(
        sim32k.base_url,
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        compression={**EARLY, "background": False},
        storage={"in_place": False},
    )
    with ProxyServer(settings) as proxy:
        loop = AgentLoop(make_client(proxy), MODEL, session_id="parent", file_lines=60)
        loop.script(sim32k)
        grow_until_compressed(loop)
        loop.step(500)
        parent = detail(proxy, "parent")
        assert parent.session.child_key is not None
        child = detail(proxy, parent.session.child_key)
    assert child.session.parent_key == "parent"
    # Its compressions (recall before asking may have put passages in view, an event too).
    assert [e.outcome for e in child.events if e.trigger != "recall-ahead"] == ["compressed"]
    assert loop.compressed_headers[-2:] == ["true", "true"]


def test_manual_compression_with_a_focus(sim32k: Simulator, db_path: str) -> None:
    with ProxyServer(make_settings(sim32k, db_path, background=False)) as proxy:
        loop = AgentLoop(make_client(proxy), MODEL, session_id="manual", file_lines=60)
        loop.script(sim32k)
        for step in range(12):  # ~12K tokens: under the threshold, more than the tail
            loop.step(step)
        response = httpx.post(
            proxy.base_url + "/sessions/manual/compress",
            json={"focus": "the failing tests"},
            headers={"authorization": "Bearer sk-agent"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["compressed"] is True, body
        assert body["tokens_after"] < body["tokens_before"]
        assert "the failing tests" in str(sim32k.summary_requests[-1].body["messages"])
        unknown = httpx.post(
            proxy.base_url + "/sessions/nobody/compress",
            headers={"authorization": "Bearer sk-agent"},
        )
        assert unknown.status_code == 404
        other_caller = httpx.post(
            proxy.base_url + "/sessions/manual/compress",
            headers={"authorization": "Bearer sk-someone-else"},
        )
        assert other_caller.status_code == 404


@pytest.mark.parametrize(
    "failure",
    [
        Fail(status=500),
        Fail(status=401),
        Hang(seconds=5),
        Reply(content=""),
        Reply(content="partial", finish_reason="length"),
    ],
    ids=["500", "401", "timeout", "empty", "truncated"],
)
def test_failing_summaries_never_break_the_conversation(db_path: str, failure: Any) -> None:
    """8K window: compression is needed to continue; a failed summary must not break history."""
    with Simulator(models={"agent-8k": ModelSpec(window=8192)}, validate_messages=True) as sim:
        settings = settings_for(
            sim.base_url,
            db_path,
            models=[{"match": "*", "upstream": "sim", "context_length": 8192}],
            compression={"summary": {"timeout_s": 1}},
        )
        with ProxyServer(settings) as proxy:
            loop = AgentLoop(make_client(proxy), "agent-8k", session_id="failing")
            agent = sim.responder if sim.responder else None
            loop.script(sim)
            agent = sim.responder

            def respond(body: dict[str, Any]) -> Any:
                if is_summary_request(body):
                    return failure
                return agent(body) if agent else None

            sim.responder = respond
            errors = []
            for step in range(30):
                try:
                    loop.step(step)
                except openai.APIStatusError as exc:
                    errors.append(exc)
                    break
    for received in sim.chat_requests:
        if not received.is_summary:
            check_invariants(received.body["messages"])
            assert received.problems == []
    assert sim.summary_requests, "the test did not reach compression"
    for error in errors:  # when the history cannot fit, the client is told why
        assert error.status_code == 400
        assert "ctxgate" in str(error) or "compress" in str(error).lower()


def test_a_held_turn_keeps_no_parsed_history_and_gives_back_what_it_served(
    sim32k: Simulator, db_path: str
) -> None:
    """The manual API's held turns are kept as the request's bytes (a parsed history freed a
    request later costs a cache miss per object) and parsed again into the view the upstream
    received: the client's own messages, or a checkpoint's followed by the client's."""
    with ProxyServer(make_settings(sim32k, db_path, background=False)) as proxy:
        sessions = proxy.services.sessions
        scope = scope_for("sk-agent")

        async def held(session: str) -> tuple[Any, Any]:
            await proxy.services.store.flush()  # bookkeeping after the answer has run
            key = SessionKey(scope, session)
            return sessions.held[key], sessions.held_turn(key)

        plain_loop = AgentLoop(make_client(proxy), MODEL, session_id="plain", file_lines=60)
        plain_loop.script(sim32k)
        for step in range(3):
            plain_loop.step(step)
        plain, plain_turn = proxy.run(held("plain"))
        plain_sent = sim32k.chat_requests[-1].body["messages"]

        loop = AgentLoop(make_client(proxy), MODEL, session_id="held", file_lines=60)
        loop.script(sim32k)
        grow_until_compressed(loop)
        loop.step(300)  # served from the checkpoint
        kept, turn = proxy.run(held("held"))
    sent = [r for r in sim32k.chat_requests if not r.is_summary][-1].body["messages"]
    for entry in (plain, kept):
        assert isinstance(entry, HeldTurn)
        assert entry.light.request.messages == [] and entry.light.request.body == {}
    assert plain_turn.view is plain_turn.request.messages
    assert plain_turn.upstream_body() == plain_turn.request.raw
    assert plain_turn.view == plain_sent
    assert turn.checkpoint_id is not None
    assert turn.view == sent
    assert orjson.loads(turn.upstream_body())["messages"] == sent
