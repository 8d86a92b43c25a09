"""Savings against a hand computation: the `openai` SDK -> ctxgate -> the simulator.

An agent's session is compressed, and its later requests go out compressed, carrying what
ctxgate adds (the summary and handoff, archive handles, the recall tool). By hand, the
uncompressed history of each request is what the simulator bills for the body the client sent
(its own count of that body), and the billed prompt is what it counted for what it received;
ctxgate's figures must match within 1%, in tokens and in money.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from compression import RECALLED_OPEN
from session.pressure import LARGE_BODY_BYTES
from tests.servers import ProxyServer, settings_for
from tests.session.ledger.test_shadow import ADMIN, COLOUR, INDENT, MODEL, TOOLS, Agent
from tests.simulator import InViewModel, ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

PRICE: dict[str, Any] = {"match": MODEL, "input": 2.00, "output": 8.00}
WINDOW = 1_048_576  # the large bodies' model: they stay under its threshold until compressed
sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW, dialect="openai")}, ModelSpec(window=128_000, dialect="openai")
)


BUILD = "BLD-7731X"  # an id an early tool result reports, and later ones name again


class Recorded(Agent):
    """The agent, keeping every body it sent; with `named`, its second tool result reports a
    build id that every result after the compression names again, so recall before asking
    puts that archived result back in view."""

    def __init__(self, proxy: ProxyServer, filler_lines: int = 40, named: bool = False) -> None:
        super().__init__(proxy, fact_in_tool_output=False, filler_lines=filler_lines)
        self.sent: list[dict[str, Any]] = []
        self.named = named
        self.compressed = False

    def step(self, stream: bool = False) -> None:
        body = {"model": MODEL, "messages": copy.deepcopy(self.messages), "tools": TOOLS}
        self.sent.append(body)
        super().step(stream)
        result = self.messages[-1]
        if self.named and self.steps == 2:
            result["content"] = f"build {BUILD} started for the formatter\n{result['content']}"
        elif self.named and self.compressed:
            result["content"] = f"{result['content']}\nwaiting on {BUILD}"

    def compress(self) -> None:
        super().compress()
        self.compressed = True


@pytest.mark.parametrize(
    ("recall", "filler_lines", "pool", "named"),
    [(True, 40, 0, False), (True, 40, 0, True), (False, 40, 0, False), (False, 1500, 2, False)],
)
def test_savings_match_a_hand_computation(
    sim: Simulator, db_path: str, recall: bool, filler_lines: int, pool: int, named: bool
) -> None:
    """Also with bodies past `LARGE_BODY_BYTES` (figures worked out off the event loop, a
    first-seen history counted in pieces in the pool), and with passages recall before asking
    placed (billed, but no part of the client's history)."""
    sim.responder = InViewModel((INDENT, COLOUR))
    settings = settings_for(
        sim.base_url,
        db_path,
        compression={"background": False, "recall": {"enabled": recall}},
        auth={"admin_key": "adm"},
        prices=[PRICE],
        server={"pool_processes": pool},
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW if pool else 128_000}],
    )
    with ProxyServer(settings) as proxy:
        agent = Recorded(proxy, filler_lines, named)
        for _ in range(10):
            agent.step()
        agent.compress()
        for _ in range(6):
            agent.step()
        proxy.run(proxy.services.store.flush())
        root = proxy.base_url.removesuffix("/v1")
        total = httpx.get(root + "/admin/savings", headers=ADMIN).json()["total"]
    forwarded = [r for r in sim.received if r.is_chat and not r.is_summary]
    assert len(forwarded) == len(agent.sent) == 16
    large = sum(len(json.dumps(body)) > LARGE_BODY_BYTES for body in agent.sent)
    assert large == (0 if filler_lines == 40 else 12)
    assert any("ctxgate_recall" in str(r.body.get("tools")) for r in forwarded) == recall
    assert any(RECALLED_OPEN in str(r.body) for r in forwarded) == named
    # By hand: the client's bodies as the simulator would bill them, against what it billed.
    full_prompt = sum(sim.count_prompt_tokens(body) for body in agent.sent)
    billed_prompt = sum(r.prompt_tokens or 0 for r in sim.received)
    assert total["billed_tokens"]["prompt"] == billed_prompt
    assert total["billed_tokens"]["cache_read"] == 0  # no tiers: the prices below are flat
    assert total["full_history_tokens"]["prompt"] == pytest.approx(full_prompt, rel=0.01)
    # Outputs are read from the provider's usage, not estimated: taken as ctxgate has them.
    extra_output = total["billed_tokens"]["output"] - total["full_history_tokens"]["output"]
    saved = full_prompt - billed_prompt - extra_output
    assert saved > 0
    assert total["tokens_saved"] == pytest.approx(saved, rel=0.01)
    usd = (full_prompt - billed_prompt) * PRICE["input"] / 1e6
    usd -= extra_output * PRICE["output"] / 1e6
    assert total["usd_saved"] == pytest.approx(usd, rel=0.01)
