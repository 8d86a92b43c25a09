"""The summary call as an upstream sees it, and what ctxgate makes of a weak summary model.

A small local model serving the summaries (llama.cpp with a 135M model) needs a typed JSON
body, often stops at its output limit and sometimes answers nothing: the conversation must
go on in every case, with a valid history and no error text committed as a summary.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import pytest

from compression import check_invariants
from compression.summary.handoff import handoff_text
from session.identity import scope_for
from storage import SessionKey
from tests.proxy.agent_loop import CONSTRAINTS, SYSTEM, AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Reply, Simulator, build_summary, is_summary_request
from tests.simulator.fixtures import simulator_fixture

MODEL = "agent-8k"
WINDOW = 8192
CLIENT_KEY = "sk-agent"
CUT_LINE = "- the fix for module_3 still needs the retry param"


sim8k = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def start_proxy(sim: Simulator, db_path: str, context_length: int = WINDOW) -> ProxyServer:
    models = [{"match": "*", "upstream": "sim", "context_length": context_length}]
    # No upstream key: the summarizer then forwards the client's Authorization, the one header
    # it takes from the client, so the body headers must come from the summarizer itself.
    settings = settings_for(sim.base_url, db_path, models=models, api_key=None)
    return ProxyServer(settings)


def answer_summaries_with(sim: Simulator, loop: AgentLoop, reply: Any) -> None:
    """The agent's turns as usual; every summary request gets `reply(body)`."""
    loop.script(sim)
    agent = sim.responder
    assert agent is not None

    def respond(body: dict[str, Any]) -> Any:
        return reply(body) if is_summary_request(body) else agent(body)

    sim.responder = respond


def run_until_summarized(loop: AgentLoop, sim: Simulator, extra_steps: int = 2) -> None:
    """Steps until a summary was requested and `extra_steps` turns went on after it."""
    step = 0
    while not sim.summary_requests:
        loop.step(step)
        step += 1
        assert step < 120, "the conversation never reached compression"
    for _ in range(extra_steps):
        loop.step(step)
        step += 1


def forwarded(sim: Simulator) -> list[Any]:
    return [r for r in sim.chat_requests if not r.is_summary]


def summaries_in(received: Any) -> list[str]:
    texts = [handoff_text(m) for m in received.body["messages"]]
    return [text for text in texts if text is not None]


def assert_sound(sim: Simulator) -> None:
    ordinary = forwarded(sim)
    assert ordinary
    for received in ordinary:
        assert received.problems == []
        check_invariants(received.body["messages"])
        assert received.body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert CONSTRAINTS[0] in json.dumps(ordinary[-1].body["messages"])


def session_events(proxy: ProxyServer, session: str) -> list[Any]:
    detail = proxy.run(
        proxy.services.store.session_detail(SessionKey(scope_for(CLIENT_KEY), session))
    )
    return list(detail.events) if detail is not None else []


def test_summary_calls_are_sent_as_json(sim8k: Simulator, db_path: str) -> None:
    with start_proxy(sim8k, db_path) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
        loop = AgentLoop(client, MODEL, session_id="typed")
        loop.script(sim8k)
        run_until_summarized(loop, sim8k, extra_steps=0)
    summary = sim8k.summary_requests[0]
    assert summary.headers.get("content-type") == "application/json"
    assert summary.headers.get("authorization") == f"Bearer {CLIENT_KEY}"
    assert isinstance(summary.body, dict) and summary.body["stream"] is False


def test_a_summary_cut_at_the_output_limit_is_kept_to_its_last_complete_line(
    sim8k: Simulator, db_path: str
) -> None:
    def truncated(body: dict[str, Any]) -> Reply:
        text = build_summary(body) + "\n## Open Items\n" + CUT_LINE
        return Reply(content=text[: -len(CUT_LINE) // 2], finish_reason="length")

    with start_proxy(sim8k, db_path) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
        loop = AgentLoop(client, MODEL, session_id="truncated")
        answer_summaries_with(sim8k, loop, truncated)
        run_until_summarized(loop, sim8k)
        events = session_events(proxy, "truncated")
    assert_sound(sim8k)
    assert all(r.outcome != "overflow" for r in forwarded(sim8k))
    first_summary = sim8k.summary_requests[0].at
    after = [r for r in forwarded(sim8k) if r.at > first_summary]
    assert after, "no request went upstream after the summary"
    carried = summaries_in(after[-1])
    assert carried, "the next request carries no summary"
    assert "## Historical Task Snapshot" in carried[0]
    assert "## Open Items" not in carried[0] and CUT_LINE[:20] not in carried[0]
    committed = [e for e in events if e.outcome == "compressed"]
    assert committed and "output limit" in (committed[0].error or "")
    assert "true" in loop.compressed_headers


def test_an_empty_summary_on_overflow_falls_back_and_the_client_gets_its_answer(
    sim8k: Simulator, db_path: str
) -> None:
    """ctxgate believes the window is 32K, so only the provider's overflow makes it compress."""
    with start_proxy(sim8k, db_path, context_length=4 * WINDOW) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
        loop = AgentLoop(client, MODEL, session_id="empty")
        answer_summaries_with(sim8k, loop, lambda body: Reply(content=""))
        run_until_summarized(loop, sim8k, extra_steps=4)
        events = session_events(proxy, "empty")
    assert_sound(sim8k)
    overflows = [i for i, r in enumerate(forwarded(sim8k)) if r.outcome == "overflow"]
    assert overflows, "the provider never refused: recovery was not exercised"
    retried = forwarded(sim8k)[overflows[0] + 1]
    assert retried.outcome == "reply"
    carried = summaries_in(retried)
    assert carried and "## Completed Actions" in carried[0]
    assert "unavailable (empty)" in carried[0]
    assert [e.outcome for e in events if e.trigger == "overflow"][0] == "fallback"
    # Every turn the client asked for was answered (no overflow error reached it).
    assert len(loop.responses) == len(loop.full_tokens)


@pytest.mark.parametrize("summary_model", ["auto", "other-model"])
def test_summary_calls_are_sized_with_the_models_calibrated_ratio(
    db_path: str, summary_model: str
) -> None:
    """The provider counts 1.7 tokens per token of ours. When summaries go to the same model,
    the ratio its real usage taught ctxgate sizes the summary input (before any summary call
    measured it); another model's tokenizer is unknown, so the compressor keeps its margin."""
    with Simulator(models={MODEL: ModelSpec(window=WINDOW, token_factor=1.7)}) as sim:
        models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
        compression = {"summary": {"model": summary_model}}
        settings = settings_for(sim.base_url, db_path, models=models, compression=compression)
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
            loop = AgentLoop(client, MODEL, session_id="ratio", file_lines=20)
            loop.script(sim)
            for step in range(4):
                loop.step(step)
            # A session's first request has no real figure to build on: its whole view is
            # estimated, and the provider's answer calibrates the estimate.
            client.chat.completions.create(
                model=MODEL, messages=loop.messages, extra_headers={"X-Session-Id": "fresh"}
            )
            # The answer calibrates once it is sent: wait for that bookkeeping.
            deadline = time.monotonic() + 5
            ratio = proxy.services.models.summary_token_ratio(MODEL)
            while ratio is None and summary_model == "auto" and time.monotonic() < deadline:
                time.sleep(0.02)
                ratio = proxy.services.models.summary_token_ratio(MODEL)
    if summary_model == "auto":
        assert ratio is not None and 1.6 < ratio < 1.8
    else:
        assert ratio is None
