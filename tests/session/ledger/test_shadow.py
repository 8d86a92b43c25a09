"""Shadow checks for real: the `openai` SDK -> ctxgate -> the simulator's in-view model.

An agent works through numbered steps; its task needs an instruction (INDENT, in its first
message) and a fact (COLOUR, in its first message or in an early tool result). After a few
steps the session is compressed through the admin API; from then on every request forwards a
compressed view, and each is shadow-checked (sample rate 1): the client's uncompressed request
is sent again twice (A, A') and compared with what the compressed one (B) answered.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from session.identity import scope_for
from session.ledger.shadow import SHADOW_HEADER
from tests.servers import ProxyServer, settings_for
from tests.simulator import InViewModel, Need, Simulator, step_result

MODEL = "gpt-4o-mini"
KEY = "sk-agent"
SESSION = "shadow/one"
ADMIN = {"authorization": "Bearer adm"}
INDENT = Need("INDENT", "tabs", "indent")
COLOUR = Need("COLOUR", "teal", "colour")
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
BOUND = 64  # compression.shadow.max_tokens


def settings(sim: Simulator, db_path: str, recall: bool = True, **shadow: Any) -> Any:
    return settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": 128_000}],
        compression={
            "background": False,
            "recall": {"enabled": recall},
            "shadow": {"enabled": True, "sample_rate": 1.0, "max_tokens": BOUND, **shadow},
        },
        auth={"admin_key": "adm"},
    )


class Agent:
    """Resends its whole history; every tool result reports the step done, with filler."""

    def __init__(
        self, proxy: ProxyServer, fact_in_tool_output: bool, filler_lines: int = 40
    ) -> None:
        self.proxy = proxy
        self.filler_lines = filler_lines
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        first = f"Apply the formatting steps one by one. {INDENT.line}."
        if not fact_in_tool_output:
            first += f" {COLOUR.line}."
        self.messages: list[Any] = [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": first},
        ]
        self.fact_in_tool_output = fact_in_tool_output
        self.call_ids: list[str] = []
        self.steps = 0

    def step(self, stream: bool = False) -> None:
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "messages": self.messages,
            "tools": TOOLS,
            "extra_headers": {"x-session-id": SESSION},
        }
        if stream:
            chunks = self.client.chat.completions.create(stream=True, **kwargs)
            calls: dict[int, dict[str, str]] = {}
            for chunk in chunks:
                for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                    call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += delta.id or ""
                    call["name"] += (delta.function and delta.function.name) or ""
                    call["arguments"] += (delta.function and delta.function.arguments) or ""
            call_id, name, arguments = calls[0]["id"], calls[0]["name"], calls[0]["arguments"]
        else:
            answer = self.client.chat.completions.create(**kwargs)
            tool_call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
            call_id = tool_call.id
            name = tool_call.function.name  # type: ignore[union-attr]
            arguments = tool_call.function.arguments  # type: ignore[union-attr]
        self.call_ids.append(call_id)
        self.steps += 1
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    }
                ],
            }
        )
        output = step_result(self.steps, filler_lines=self.filler_lines)
        if self.fact_in_tool_output and self.steps == 3:  # mid-history: compressed away
            output = f"{COLOUR.line}\n{output}"
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})

    def compress(self) -> None:
        path = f"/admin/sessions/{scope_for(KEY)}/{quote(SESSION, safe='')}/compress"
        root = self.proxy.base_url.removesuffix("/v1")
        done = httpx.post(root + path, headers=ADMIN, json={}, timeout=30)
        assert done.status_code == 200, done.text
        assert done.json()["compressed"], done.text


def run(proxy: ProxyServer, fact_in_tool_output: bool, after: int, stream: bool = False) -> Agent:
    agent = Agent(proxy, fact_in_tool_output)
    for _ in range(10):
        agent.step()
    agent.compress()
    for _ in range(after):
        agent.step(stream)
    return agent


def shadow_figures(proxy: ProxyServer, samples: int) -> dict[str, Any]:
    """/admin/savings' shadow figures once `samples` checks are in (they run afterwards)."""
    root = proxy.base_url.removesuffix("/v1")
    deadline = time.monotonic() + 20
    while True:
        figures: dict[str, Any] = httpx.get(root + "/admin/savings", headers=ADMIN).json()
        shadow: dict[str, Any] = figures["shadow"]
        if shadow["total"]["samples"] >= samples or time.monotonic() > deadline:
            return shadow
        time.sleep(0.05)


def shadow_requests(sim: Simulator) -> list[Any]:
    return [r for r in sim.received if r.headers.get(SHADOW_HEADER) == "1"]


@pytest.mark.parametrize("recall", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_agreement_is_full_when_the_compression_keeps_what_the_model_acts_on(
    sim: Simulator, db_path: str, stream: bool, recall: bool
) -> None:
    sim.responder = InViewModel((INDENT, COLOUR))
    with ProxyServer(settings(sim, db_path, recall)) as proxy:
        run(proxy, fact_in_tool_output=False, after=4, stream=stream)
        shadow = shadow_figures(proxy, 4)
        metrics = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    # Labelled with the trigger of the compression that made the view: the operator's.
    labels = f'model="{MODEL}",pair="b_vs_a",trigger="manual"'
    assert f"ctxgate_shadow_agreements_total{{{labels}}} 4.0" in metrics
    model = shadow["models"][MODEL]
    assert model["samples"] == 4
    assert model["agreement"] == 1.0
    assert model["noise_floor_agreement"] == 1.0  # a deterministic model agrees with itself
    assert set(model["triggers"]) == {"manual"}
    # A and A' for each check; B sent again when the client's answer was streamed, or was
    # not B's: ctxgate's recall tool went upstream with the view (B is the view without it).
    resent = stream or recall
    assert len(shadow_requests(sim)) == 4 * (3 if resent else 2)
    for request in shadow_requests(sim):
        assert "ctxgate_recall" not in json.dumps(request.body.get("tools") or [])


def test_samples_of_a_background_compressions_views_carry_its_trigger(
    sim: Simulator, db_path: str
) -> None:
    sim.responder = InViewModel((INDENT, COLOUR))
    config = settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": 9000}],
        compression={
            "background": True,
            "options": {"min_threshold_tokens": 1000},
            "shadow": {"enabled": True, "sample_rate": 1.0, "max_tokens": BOUND},
        },
        auth={"admin_key": "adm"},
    )
    with ProxyServer(config) as proxy:
        agent = Agent(proxy, fact_in_tool_output=False)
        for _ in range(16):
            agent.step()
            time.sleep(0.2)  # the background compression commits between requests
        shadow = shadow_figures(proxy, 1)
    triggers = set(shadow["models"][MODEL]["triggers"])
    assert "post_response" in triggers, triggers
    assert "checkpoint" not in triggers


def test_agreement_drops_when_the_compression_removes_a_fact_the_model_needs(
    sim: Simulator, db_path: str
) -> None:
    sim.responder = InViewModel((INDENT, COLOUR))
    with ProxyServer(settings(sim, db_path)) as proxy:
        agent = run(proxy, fact_in_tool_output=True, after=3)
        shadow = shadow_figures(proxy, 3)
    model = shadow["models"][MODEL]
    assert model["samples"] == 3
    assert model["agreement"] < 1.0
    assert model["noise_floor_agreement"] == 1.0
    # The client's compressed requests lacked the fact: its model searched for it.
    assert "COLOUR" in agent.messages[-2]["tool_calls"][0]["function"]["arguments"]


def test_a_sampled_model_has_a_noise_floor_below_full_agreement(
    sim: Simulator, db_path: str
) -> None:
    sim.responder = InViewModel((INDENT, COLOUR), noise=0.5, seed=7)
    with ProxyServer(settings(sim, db_path)) as proxy:
        run(proxy, fact_in_tool_output=False, after=8)
        shadow = shadow_figures(proxy, 8)
    model = shadow["models"][MODEL]
    assert model["samples"] == 8
    assert model["noise_floor_agreement"] < 1.0


def test_shadow_calls_never_reach_the_client_nor_the_session(
    sim: Simulator, db_path: str, tmp_path: Any
) -> None:
    """The same deterministic run with shadow checks on and off leaves the same session, and
    the client never gets an answer to a bounded (shadow) request."""
    sim.responder = InViewModel((INDENT, COLOUR))
    with ProxyServer(settings(sim, db_path)) as proxy:
        agent = run(proxy, fact_in_tool_output=False, after=4)
        shadow_figures(proxy, 4)
        with_shadow = session_figures(proxy)
    assert len(shadow_requests(sim)) == 12  # A, A' and B (the view went with ctxgate's tool)
    assert all(not call_id.startswith(f"call_b{BOUND}_") for call_id in agent.call_ids)
    sim.clear()
    sim.responder = InViewModel((INDENT, COLOUR))
    plain = settings(sim, str(tmp_path / "plain.db"), enabled=False)
    with ProxyServer(plain) as proxy:
        run(proxy, fact_in_tool_output=False, after=4)
        without = session_figures(proxy)
    assert shadow_requests(sim) == []
    assert with_shadow == without


def test_the_daily_budget_stops_shadow_calls(sim: Simulator, db_path: str) -> None:
    sim.responder = InViewModel((INDENT, COLOUR))
    # Room for one check: its estimate (3 calls of the ~5.6K-token history plus the bound)
    # fits, and after its ~10K tokens the next one's does not.
    with ProxyServer(settings(sim, db_path, daily_tokens=20_000)) as proxy:
        run(proxy, fact_in_tool_output=False, after=4)
        shadow = shadow_figures(proxy, 1)
        time.sleep(0.5)  # any check still to come would have started by now
        shadow = shadow_figures(proxy, 1)
        spent = proxy.services.gateway.charges.shadow.spent_today
    assert shadow["total"]["samples"] == 1
    assert len(shadow_requests(sim)) == 3  # A, A' and B (the view went with ctxgate's tool)
    assert 0 < spent <= 20_000


def session_figures(proxy: ProxyServer) -> dict[str, Any]:
    """The session as the admin API shows it, less its times."""
    proxy.run(proxy.services.store.flush())
    root = proxy.base_url.removesuffix("/v1")
    path = f"/admin/sessions/{scope_for(KEY)}/{quote(SESSION, safe='')}"
    detail = httpx.get(root + path, headers=ADMIN).json()
    session = detail["session"]
    kept = (
        "request_count",
        "compression_count",
        "last_prompt_tokens",
        "last_completion_tokens",
        "last_message_count",
        "total_prompt_tokens",
        "total_completion_tokens",
    )
    usage = [(u["prompt_tokens"], u["completion_tokens"]) for u in detail["usage"]]
    return {"session": {k: session[k] for k in kept}, "usage": usage}
