"""Savings of a real session: the `anthropic` SDK -> ctxgate -> the simulator's prompt cache.

The simulator bills each request as Anthropic does (fresh input, cache reads, cache writes at
the client's breakpoints); what ctxgate's admin API, metrics and ledger report must add up to
what the client was told it was billed, plus the summary calls it never saw.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.proxy.doors.messages.test_door import SMALL, Agent
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.agent import ScriptedAgent
from tests.simulator.fixtures import simulator_fixture

ADMIN = {"authorization": "Bearer adm"}
PRICE = {"input": 3.00, "cached_input": 0.30, "cache_write": 3.75, "output": 15.00}


sim = simulator_fixture(
    {SMALL: ModelSpec(window=16_384, dialect="anthropic")},
    ModelSpec(window=200_000, dialect="anthropic"),
)


def settings(sim: Simulator, db_path: str) -> Any:
    return settings_for(
        sim.url + "/v1",
        db_path,
        api_key=None,
        models=[{"match": "*", "upstream": "sim", "context_length": 16_384}],
        upstreams={"sim": {"base_url": sim.url + "/v1", "apis": ["chat", "messages"]}},
        auth={"admin_key": "adm"},
        prices=[{"match": SMALL, **PRICE}],
    )


def admin(proxy: ProxyServer, path: str) -> Any:
    root = f"http://127.0.0.1:{proxy.port}"
    response = httpx.get(f"{root}/admin/{path}", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def settled(proxy: ProxyServer, requests: int) -> dict[str, Any]:
    """/admin/savings once every request's charge is recorded (they are, after the answer)."""
    deadline = time.monotonic() + 10
    while True:
        figures: dict[str, Any] = admin(proxy, "savings")
        if figures["total"]["requests"] >= requests or time.monotonic() > deadline:
            return figures
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True])
def test_the_ledger_adds_up_to_what_the_provider_billed(
    sim: Simulator, db_path: str, stream: bool
) -> None:
    sim.responder = ScriptedAgent(turns=30, output_lines=10)
    with ProxyServer(settings(sim, db_path)) as proxy:
        agent = Agent(proxy, SMALL, stream)
        while agent.turn():
            pass
        figures = settled(proxy, len(agent.usages))
        sessions = admin(proxy, "sessions")
        (row,) = sessions["data"]
        detail = admin(proxy, f"sessions/{row['scope']}/{row['key']}")
        metrics = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert any(c for c in agent.checkpoints), "no compression happened"
    total = figures["total"]
    assert total["requests"] == len(agent.usages)
    client = {
        "uncached": sum(u["input_tokens"] for u in agent.usages),
        "cache_read": sum(u["cache_read_input_tokens"] for u in agent.usages),
        "cache_write": sum(u["cache_creation_input_tokens"] for u in agent.usages),
        "output": sum(u["output_tokens"] for u in agent.usages),
    }
    assert client["cache_read"] and client["cache_write"] and client["uncached"]
    overhead = total["overhead_tokens"]
    assert set(overhead) == {"summary"}
    summaries = [r for r in sim.received if r.is_summary]
    assert summaries and overhead["summary"]["prompt"] == sum(r.prompt_tokens for r in summaries)
    billed = total["billed_tokens"]
    for tier, tokens in client.items():
        assert billed[tier] == tokens + overhead["summary"][tier], tier
    # Money: the billed tiers at the configured price.
    usd = sum(billed[tier] * PRICE[name] for tier, name in _PRICED) / 1e6
    assert total["billed_usd"] == pytest.approx(usd)
    full = total["full_history_tokens"]
    assert full["prompt"] > billed["prompt"] - overhead["summary"]["prompt"]
    assert total["full_history_usd"] == pytest.approx(
        sum(full[tier] * PRICE[name] for tier, name in _PRICED) / 1e6
    )
    assert total["cache_hit_ratio_before"] is not None
    assert total["cache_hit_ratio_after"] is not None
    assert row["savings"]["usd_saved"] == pytest.approx(total["usd_saved"])
    # Per request: each client request's billed tiers, as the client was told, in order.
    requests = [c for c in detail["charges"] if c["kind"] == "request"]
    assert [
        (c["billed_tokens"]["uncached"], c["billed_tokens"]["cache_read"]) for c in requests
    ] == [(u["input_tokens"], u["cache_read_input_tokens"]) for u in agent.usages]
    assert all(c["full_history_usd"] is not None for c in requests)
    assert f'ctxgate_billed_usd_total{{kind="request",model="{SMALL}"}}' in metrics


_PRICED = (
    ("uncached", "input"),
    ("cache_read", "cached_input"),
    ("cache_write", "cache_write"),
    ("output", "output"),
)
