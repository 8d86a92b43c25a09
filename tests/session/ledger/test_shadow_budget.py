"""The shadow budget is a cap, for checks running at once too, and what it reports is what
the shadow calls were billed: the `openai` SDK -> ctxgate -> the simulator's in-view model.

A session is compressed through the admin API; then many copies of its next request arrive at
once, each forwarded compressed and each a candidate for a check (sample rate 1). The
simulator answers shadow calls slowly, so the checks overlap.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai

from session.ledger.shadow import SHADOW_HEADER
from tests.servers import ProxyServer
from tests.session.ledger.test_shadow import (
    ADMIN,
    BOUND,
    COLOUR,
    INDENT,
    KEY,
    MODEL,
    SESSION,
    TOOLS,
    Agent,
    settings,
)
from tests.simulator import Fail, InViewModel, Simulator

BUDGET = 40_000
CONCURRENT = 16


class SlowShadows:
    """The in-view model, answering bounded (shadow) calls after a pause; with `fail_again`,
    every second shadow call of a history fails (A is billed, A' is not answered)."""

    def __init__(self, pause_s: float, fail_again: bool = False) -> None:
        self.model = InViewModel((INDENT, COLOUR))
        self.pause_s = pause_s
        self.fail_again = fail_again
        self.shadow_calls = 0

    async def __call__(self, body: dict[str, Any]) -> Any:
        if body.get("max_completion_tokens") != BOUND:
            return self.model(body)
        self.shadow_calls += 1
        await asyncio.sleep(self.pause_s)
        if self.fail_again and self.shadow_calls % 2 == 0:
            return Fail(500)
        return self.model(body)


def compressed_agent(proxy: ProxyServer) -> Agent:
    agent = Agent(proxy, fact_in_tool_output=False)
    for _ in range(10):
        agent.step()
    agent.compress()
    return agent


def ask_at_once(proxy: ProxyServer, messages: list[Any], n: int) -> None:
    def ask(_: int) -> None:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, extra_headers={"x-session-id": SESSION}
        )

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(ask, range(n)))


def settled(proxy: ProxyServer) -> dict[str, Any]:
    """/admin/savings once every check has ended and every charge is written."""
    shadow = proxy.services.gateway.charges.shadow
    deadline = time.monotonic() + 30
    while shadow.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not shadow.running
    proxy.run(proxy.services.store.flush())
    root = proxy.base_url.removesuffix("/v1")
    figures: dict[str, Any] = httpx.get(root + "/admin/savings", headers=ADMIN).json()
    return figures


def assert_billed(sim: Simulator, spent: int) -> None:
    """`spent` is what the simulator billed for the shadow calls it answered: their prompts
    (from its log) plus their answers (each at most the bound)."""
    answered = [r for r in sim.received if r.headers.get(SHADOW_HEADER) == "1" and r.status == 200]
    prompts = sum(r.prompt_tokens or 0 for r in answered)
    assert answered
    assert prompts < spent <= prompts + BOUND * len(answered)


def test_concurrent_checks_spend_at_most_their_budget(sim: Simulator, db_path: str) -> None:
    sim.responder = SlowShadows(pause_s=0.3)
    with ProxyServer(settings(sim, db_path, daily_tokens=BUDGET)) as proxy:
        agent = compressed_agent(proxy)
        ask_at_once(proxy, agent.messages, CONCURRENT)
        figures = settled(proxy)
        spent_today = proxy.services.gateway.charges.shadow.spent_today
        reserved = proxy.services.gateway.charges.shadow.reserved
    spent = figures["shadow"]["total"]["tokens"]
    assert 0 < spent <= 1.1 * BUDGET, spent
    assert spent == spent_today
    assert_billed(sim, spent)
    assert reserved == 0  # every check gave back what it did not spend
    overhead = figures["total"]["overhead_tokens"]["shadow"]
    assert overhead["prompt"] + overhead["output"] == spent
    # Beside compression's own savings, never folded into them unsaid.
    total = figures["total"]
    assert total["shadow_checks"]["tokens"] == spent
    assert total["compression"]["tokens_saved"] == total["tokens_saved"] + spent
    # More than one check ran: the cap did not serialise them down to one.
    assert figures["shadow"]["total"]["samples"] >= 2


def test_the_reported_figure_counts_checks_that_failed_after_spending(
    sim: Simulator, db_path: str
) -> None:
    sim.responder = SlowShadows(pause_s=0.0, fail_again=True)
    with ProxyServer(settings(sim, db_path)) as proxy:
        agent = compressed_agent(proxy)
        for _ in range(3):
            agent.step()
        figures = settled(proxy)
    shadow = figures["shadow"]["total"]
    assert_billed(sim, shadow["tokens"])
    assert shadow["samples"] == 0  # every check stopped at A'
    assert shadow["checked_tokens"] == 0
    assert figures["shadow"]["models"][MODEL]["tokens"] == shadow["tokens"]
