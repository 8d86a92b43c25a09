"""The overhead benchmark's floor relay and how the report sets proxies against it.

The floor is driven with the OpenAI SDK in front of the provider simulator: what the upstream
received and what the client got must be what a direct call gives.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import openai
import orjson
import pytest

from bench.overhead import parse_args
from bench.overhead_cells import round_orders
from bench.overhead_floor import Relay
from bench.overhead_report import _relate_to_floor, floor_markdown
from bench.overhead_requests import SIZES, Bodies, build_history
from tests.servers import ThreadedServer
from tests.simulator import Simulator

MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three rivers, with a \u00e9 and a \u2603 in the answer."},
]


@pytest.fixture(params=["httpx", "aiohttp"])
def floor(request: pytest.FixtureRequest, sim: Simulator) -> Iterator[ThreadedServer]:
    relay = Relay(sim.base_url, request.param)
    with ThreadedServer(relay, name="floor", lifespan="on") as server:
        yield server


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-floor-test", max_retries=0)


def test_floor_relays_a_plain_answer(sim: Simulator, floor: ThreadedServer) -> None:
    direct = _client(sim.base_url).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    relayed = _client(f"http://127.0.0.1:{floor.port}/v1").chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    first, second = sim.chat_requests
    assert second.raw == first.raw  # the body reached the upstream byte for byte
    assert second.headers["authorization"] == "Bearer sk-floor-test"
    assert relayed.choices[0].message.content == direct.choices[0].message.content
    assert relayed.usage == direct.usage


def test_floor_relays_a_stream_event_by_event(sim: Simulator, floor: ThreadedServer) -> None:
    def collect(base_url: str) -> tuple[str, list[Any]]:
        stream = _client(base_url).chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, [c.usage for c in chunks if c.usage is not None]

    direct_text, direct_usage = collect(sim.base_url)
    text, usage = collect(f"http://127.0.0.1:{floor.port}/v1")
    assert text == direct_text and text
    assert usage == direct_usage and len(usage) == 1
    assert sim.chat_requests[-1].body["stream"] is True


def _target(p50: float, cpu: float, direct_p50: float = 3.0) -> dict[str, Any]:
    return {"p50": p50, "added_p50": p50 - direct_p50, "cpu_ms_per_request": cpu}


def test_proxies_are_set_against_the_floor() -> None:
    seq: dict[str, Any] = {
        "cell": "8k-nonstream-seq",
        "clients": 1,
        "targets": {
            "direct": _target(3.0, 1.5),
            "floor": _target(5.0, 1.2),
            "ctxgate": _target(6.0, 3.0),
        },
    }
    crowded: dict[str, Any] = {
        "cell": "8k-nonstream-c16",
        "clients": 16,
        "targets": {
            "direct": _target(60.0, 1.5, 60.0),
            "floor": _target(58.5, 1.2, 60.0),
            "ctxgate": _target(61.0, 3.6, 60.0),
        },
    }
    for summary in (seq, crowded):
        _relate_to_floor(summary["targets"])
    ctx = seq["targets"]["ctxgate"]
    assert ctx["floor_ratio_p50"] == pytest.approx(1.5)
    assert ctx["above_floor_p50"] == pytest.approx(1.0)
    assert ctx["floor_ratio_cpu"] == pytest.approx(2.5)
    # Under 16 clients the floor sits below the direct call: no ratio, ms above the floor.
    busy = crowded["targets"]["ctxgate"]
    assert math.isnan(busy["floor_ratio_p50"])
    assert busy["above_floor_p50"] == pytest.approx(2.5)
    table = "\n".join(floor_markdown([seq, crowded], ["floor", "ctxgate"]))
    assert "| 8k-nonstream-seq | 2.00 | +3.00 (1.50x / +1.00; 2.5x) | ≤ 1.5x: met |" in table
    assert "| 8k-nonstream-c16 | -1.50 | +1.00 (— / +2.50; 3.0x) | ≤ floor + 1.5 ms: MISSED |" in (
        table
    )


def test_only_selects_proxies() -> None:
    assert parse_args(["--only", "ctxgate,floor"]).proxies == ["ctxgate", "floor"]
    assert parse_args([]).proxies == ["floor", "floor-aiohttp", "ctxgate", "litellm", "headroom"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "ctxgate,nginx"])


@pytest.mark.parametrize("count", [2, 3, 4, 5, 6])
def test_every_target_follows_every_other_equally_often(count: int) -> None:
    targets = ["direct", "floor", "floor-aiohttp", "ctxgate", "litellm", "headroom"][:count]
    orders = round_orders(targets)
    assert all(sorted(order) == sorted(targets) for order in orders)
    firsts = Counter(order[0] for order in orders)
    pairs = Counter((a, b) for order in orders for a, b in pairwise(order))
    assert set(firsts) == set(targets) and len(set(firsts.values())) == 1
    assert len(pairs) == count * (count - 1) and len(set(pairs.values())) == 1


def test_targets_are_judged_against_the_best_floor() -> None:
    def cell(name: str, aio: float, ctx: float) -> dict[str, Any]:
        return {
            "cell": name,
            "clients": 1,
            "targets": {
                "direct": _target(3.0, 1.5),
                "floor": _target(5.0, 1.2),
                "floor-aiohttp": _target(3.0 + aio, 0.8),
                "ctxgate": _target(3.0 + ctx, 1.6),
            },
        }

    same, fresh = cell("64k-nonstream-seq", 1.0, 1.8), cell("64k-fresh-nonstream-seq", 1.0, 1.8)
    for summary in (same, fresh):
        _relate_to_floor(summary["targets"])
    ctx = same["targets"]["ctxgate"]
    assert ctx["floor_ratio_p50"] == pytest.approx(0.9)  # against httpx's floor: met
    assert ctx["best_ratio_p50"] == pytest.approx(1.8) and ctx["best_floor"] == "floor-aiohttp"
    assert ctx["best_ratio_cpu"] == pytest.approx(2.0)
    table = "\n".join(floor_markdown([same, fresh], ["floor", "floor-aiohttp", "ctxgate"]))
    assert "ctxgate target (against the faster floor)" in table
    # A repeated body is held to 1.5x the best floor, one no session has seen to 2x.
    assert "| +1.80 (1.80x / +0.80; 2.0x) vs floor-aiohttp | ≤ 1.5x: MISSED |" in table
    assert "| 64k-fresh-nonstream-seq |" in table and "| ≤ 2x: met |" in table


def test_bodies_are_new_or_grow_as_a_session_does() -> None:
    messages, tools, tokens = build_history(SIZES["8k"])
    fresh = Bodies("fresh", messages, tools, tokens, False)
    sent = [fresh.get(fresh.next_round(), 0, "s") for _ in range(3)]
    assert len({body for body, _ in sent}) == 3 and len({sid for _, sid in sent}) == 3
    assert all(orjson.loads(body)["messages"][1:] != messages[1:] for body, _ in sent)
    novel = Bodies("novel", messages, tools, tokens, False)
    opened = [novel.get(novel.next_round(), 0, "s") for _ in range(3)]
    assert len({body[:100] for body, _ in opened}) == 3 and len({s for _, s in opened}) == 3
    assert all(orjson.loads(body)["messages"][1:] == messages[1:] for body, _ in opened)
    growing = Bodies("growing", messages, tools, tokens, False)
    lap = [growing.get(growing.next_round(), 0, "s") for _ in range(growing.turns + 1)]
    other = growing.get(0, 1, "s")
    assert other[0] != lap[0][0] and other[1] != lap[0][1]  # no two clients send one body
    sizes = [len(orjson.loads(body)["messages"]) for body, _ in lap]
    assert growing.turns >= 3 and sizes[:-1] == sorted(set(sizes[:-1]))
    assert sizes[-2] == len(messages) and sizes[-1] == sizes[0]  # the next lap starts over
    assert len({sid for _, sid in lap[:-1]}) == 1 and lap[-1][1] != lap[0][1]
    same = Bodies("same", messages, tools, tokens, True)
    assert same.get(0, 1, "s") == same.get(5, 1, "s")
