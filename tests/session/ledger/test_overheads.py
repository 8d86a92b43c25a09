"""The calls compression makes necessary are charged: a summary call and a recall round, in
a completed and a streamed request (the recall set-up of tests/session/test_recall.py)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.session.test_recall import ask, client_for, proxy_for, sim  # noqa: F401
from tests.simulator import Simulator


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_summary_calls_and_recall_rounds_are_charged(
    sim: Simulator,  # noqa: F811
    tmp_path: Any,
    stream: bool,
) -> None:
    with proxy_for(sim, tmp_path) as proxy:
        ask(client_for(proxy), stream)
        url = proxy.base_url.removesuffix("/v1") + "/admin/savings"
        for _ in range(100):
            total = httpx.get(url, headers={"Authorization": "Bearer adm"}).json()["total"]
            if {"summary", "recall"} <= set(total["overhead_tokens"]) and total["requests"]:
                break
            time.sleep(0.05)
    calls = [r for r in sim.received if r.body]
    summaries = [r for r in calls if r.is_summary]
    rounds = [r for r in calls if not r.is_summary][1:]  # after the client's first round
    overhead = total["overhead_tokens"]
    assert overhead["summary"]["prompt"] == sum(r.prompt_tokens for r in summaries)
    assert rounds and overhead["recall"]["prompt"] == sum(r.prompt_tokens for r in rounds)
    assert total["requests"] == 1
