"""A Responses agent session far past the window through ctxgate, and overflow recovery (as a
status, and as `response.failed` inside a 200 stream) before the first byte reaches the client.

The simulator rejects what OpenAI rejects: a call without its output (or the reverse) and a
reasoning item whose `encrypted_content` was altered; every request it received is checked."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from session.identity import scope_for
from storage import SessionKey
from tests.proxy.responses_agent import INSTRUCTIONS, SHELL, ResponsesAgent
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture
from tests.simulator.responses_items import count_input_tokens
from tests.simulator.shell_agent import ShellAgent

MODEL = "agent-8k"
WINDOW = 8192
EARLY = {"options": {"min_threshold_tokens": 1000}}


sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)})


def proxy_for(
    sim: Simulator, db_path: str, window: int = WINDOW, **compression: Any
) -> ProxyServer:
    models = [{"match": "*", "upstream": "sim", "context_length": window}]
    settings = settings_for(
        sim.base_url, db_path, models=models, compression={**EARLY, **compression}
    )
    return ProxyServer(settings)


def client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)


def history_tokens(sim: Simulator, items: list[dict[str, Any]]) -> int:
    """What the client's whole history would cost the provider, uncompressed."""
    body = {"tools": [SHELL], "instructions": INSTRUCTIONS}
    return count_input_tokens(body, items, sim.responses.seal)


def compressions(proxy: ProxyServer, session: str) -> list[str]:
    found = proxy.run(
        proxy.services.store.session_detail(SessionKey(scope_for("sk-agent"), session))
    )
    return [event.outcome for event in found.events] if found is not None else []


def test_a_session_five_windows_long_keeps_every_request_valid(
    sim: Simulator, db_path: str
) -> None:
    sim.responder = ShellAgent(turns=200)
    with proxy_for(sim, db_path) as proxy:
        agent = ResponsesAgent(client(proxy), MODEL, "long-1", output_lines=90)
        turns = 0
        while history_tokens(sim, agent.items) < 5 * WINDOW:
            assert agent.turn(stream=turns % 2 == 0)  # an SDK error fails the test here
            turns += 1
            assert turns < 120
        events = compressions(proxy, "long-1")
    forwarded = sim.responses_requests
    assert len(forwarded) == turns
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    assert all(r.status == 200 and r.outcome == "reply" for r in forwarded)
    assert max(r.prompt_tokens or 0 for r in forwarded) < WINDOW
    assert events.count("compressed") >= 2
    assert [h["x-ctxgate-compressed"] for h in agent.headers].count("true") >= 2
    # The agent kept going where it was: its step count never went back.
    assert agent.steps == turns
    # Reasoning reached the provider exactly as it issued it, the newest always included.
    last = forwarded[-1].body["input"]
    kept = [item for item in last if item.get("type") == "reasoning"]
    # (the agent's own newest reasoning came with the answer to that request)
    newest = [item for item in agent.items if item.get("type") == "reasoning"][-2]
    assert kept and kept[-1] == newest
    assert all(orjson.dumps(item) in forwarded[-1].raw for item in kept)


def overflowing_history(turns: int, lines: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go."}]}
    ]
    for step in range(turns):
        call_id = f"call_{step}"
        arguments = orjson.dumps({"command": ["bash", "-lc", f"cat f{step}.py"]}).decode()
        items.append(
            {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": arguments}
        )
        output = "\n".join(f"f{step}.py line {n}: x = {n * step}" for n in range(lines))
        items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    search = {"type": "search", "query": "release notes"}
    items.append({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": search})
    items.append(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Next?"}]}
    )
    return items


@pytest.mark.parametrize("stream_errors", ["status", "event"])
def test_an_overflow_is_recovered_before_the_first_byte(db_path: str, stream_errors: str) -> None:
    spec = ModelSpec(window=6000, stream_errors=stream_errors)
    with Simulator(models={MODEL: spec}) as sim:
        sim.responder = lambda body: "Recovered."
        # ctxgate believes the window is large: only the provider's error can tell it.
        with proxy_for(sim, db_path, window=128_000) as proxy:
            items = overflowing_history(turns=12, lines=60)
            stream = client(proxy).responses.create(
                model=MODEL,
                input=items,
                stream=True,
                store=False,
                extra_headers={"session-id": "of"},
            )
            headers = stream.response.headers
            kinds = [event.type for event in stream]
        received = sim.responses_requests
    assert kinds[0] == "response.created" and kinds.count("response.created") == 1
    assert kinds[-1] == "response.completed" and "response.failed" not in kinds
    assert headers["x-ctxgate-trigger"] == "overflow"
    assert [r.outcome for r in received] == ["overflow", "reply"]
    assert received[-1].problems == []
    sent = received[-1].body["input"]
    assert len(sent) < len(items) and sent[-1] == items[-1]
    opaque = [item for item in sent if item.get("type") == "web_search_call"]
    assert opaque in ([], [items[-2]])  # dropped with its region, or kept as it came


def test_an_overflow_without_a_stream_is_recovered(sim: Simulator, db_path: str) -> None:
    sim.responder = lambda body: "Fits now."
    with proxy_for(sim, db_path, window=128_000) as proxy:
        items = overflowing_history(turns=12, lines=60)
        raw = client(proxy).responses.with_raw_response.create(model=MODEL, input=items)
    assert raw.parse().output_text == "Fits now."
    assert raw.headers["x-ctxgate-trigger"] == "overflow"
    assert [r.outcome for r in sim.responses_requests] == ["overflow", "reply"]


def test_a_providers_compaction_item_travels_verbatim(sim: Simulator, db_path: str) -> None:
    sim.responder = ShellAgent(turns=200)
    with proxy_for(sim, db_path) as proxy:
        sdk = client(proxy)
        agent = ResponsesAgent(sdk, MODEL, "sealed-1", output_lines=90)
        trigger = [*agent.items, {"type": "compaction_trigger"}]
        compacted = sdk.responses.with_raw_response.create(model=MODEL, input=trigger)  # type: ignore[arg-type]
        [sealed] = compacted.http_response.json()["output"]
        assert sealed["type"] == "compaction"
        agent.items.append(sealed)
        turns = 0
        while not compressions(proxy, "sealed-1"):
            assert agent.turn(stream=True)
            turns += 1
            assert turns < 60
        assert agent.turn(stream=False)
    forwarded = sim.responses_requests[1:]
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    assert all(r.status == 200 for r in forwarded)
    carried = [r for r in forwarded if b'"type":"compaction"' in r.raw]
    # Carried by every request, the ones ctxgate compressed and re-serialised included.
    assert len(carried) == len(forwarded)
    assert all(orjson.dumps(sealed) in r.raw for r in carried)
    assert "true" in [h["x-ctxgate-compressed"] for h in agent.headers]


def test_an_overflow_that_cannot_be_recovered_is_an_error_status(db_path: str) -> None:
    with Simulator(models={MODEL: ModelSpec(window=2000, stream_errors="event")}) as sim:
        with proxy_for(sim, db_path, window=128_000) as proxy:
            huge = [{"role": "user", "content": "word " * 5000}]
            with pytest.raises(openai.BadRequestError) as refused:
                client(proxy).responses.create(model=MODEL, input=huge, stream=True)  # type: ignore[arg-type]
    # Not a 200 stream that breaks: the status tells the client before anything started.
    assert refused.value.status_code == 400
    assert "context_length_exceeded" in refused.value.response.text
    assert refused.value.response.headers["x-ctxgate-error"]
    assert [r.outcome for r in sim.responses_requests] == ["overflow"]
