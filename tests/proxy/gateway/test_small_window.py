"""A build-fixing session at a 2,048-token window whose provider counts a third more tokens
than ctxgate's estimate, through ctxgate to the simulator: every overflow the provider answers
is recovered from (compressed and retried), none reaches the client, and the provider's own
count in its error teaches ctxgate's calibration."""

from __future__ import annotations

import uuid
from pathlib import Path

import openai
import pytest

from tests.agents.build_log_session import INSTRUCTION, BuildSession
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

MODEL = "tiny-build"
WINDOW = 2048


@pytest.mark.parametrize("configured", [WINDOW, 2 * WINDOW])
def test_no_overflow_reaches_the_client_at_a_small_window(tmp_path: Path, configured: int) -> None:
    spec = ModelSpec(window=WINDOW, token_factor=1.33, count_max_tokens=True)
    with Simulator(models={MODEL: spec}) as sim:
        settings = settings_for(
            sim.base_url,
            str(tmp_path / "ctxgate.db"),
            models=[{"match": "*", "upstream": "sim", "context_length": configured}],
            compression={"options": {"summary_min_tokens": 128}},
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-c", max_retries=0)
            session = BuildSession(client, MODEL, f"build-{uuid.uuid4().hex[:8]}")
            session.run()
            ratio = proxy.services.models.calibration(MODEL).ratio
        agent = [r for r in sim.chat_requests if not r.is_summary]
    assert session.errors == [], session.errors
    assert session.answered == 14
    overflows = [r for r in agent if r.status == 400]
    fitted = [r for r in agent if r.status == 200]
    assert len(fitted) == 14
    assert all(INSTRUCTION in str(r.body["messages"]) for r in fitted)
    assert ratio > 1.2, (ratio, len(overflows))
