"""Claude Code as a real client: `claude -p` through ctxgate against the simulator at a 16K
window, for 20+ tool turns, with at least one compression (runs when the binary is installed;
CTXGATE_TEST_CLAUDE_CODE=1 makes a missing binary a failure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.agents.claude_code import ClaudeCode
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.agent import ScriptedAgent

MODEL = "claude-sim-16k"
WINDOW = 16_384
TURNS = 22


def _agent() -> ClaudeCode:
    agent = ClaudeCode.installed()
    if agent is None:
        if os.environ.get("CTXGATE_TEST_CLAUDE_CODE") == "1":
            pytest.fail("CTXGATE_TEST_CLAUDE_CODE=1 but Claude Code is not installed")
        pytest.skip("Claude Code is not installed (scripts/install-claude-code.sh)")
    return agent


def test_claude_code_runs_through_ctxgate(tmp_path: Path) -> None:
    agent = _agent()
    with Simulator(
        models={MODEL: ModelSpec(window=WINDOW, dialect="anthropic")},
        default=ModelSpec(window=WINDOW, dialect="anthropic"),
    ) as sim:
        sim.responder = ScriptedAgent(turns=TURNS, output_lines=60)
        settings = settings_for(
            sim.url + "/v1",
            str(tmp_path / "ctxgate.db"),
            api_key=None,
            models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
            upstreams={"sim": {"base_url": sim.url + "/v1", "apis": ["chat", "messages"]}},
        )
        with ProxyServer(settings) as proxy:
            run = agent.run(
                "Run the listing commands you are given and read their output.",
                base_url=f"http://127.0.0.1:{proxy.port}",
                model=MODEL,
            )
        received = sim.received
    turns = [r for r in received if r.path.endswith("/messages") and not r.is_summary]
    summaries = [r for r in received if r.is_summary]
    problems = [p for r in received for p in r.problems]
    report = _figures(turns)
    print(f"claude code through ctxgate: {report}, summaries={len(summaries)}")
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert not problems, problems[:3]
    assert sum(1 for r in turns if r.outcome == "reply") >= TURNS
    assert summaries, "no compression happened"
    assert max(r.prompt_tokens or 0 for r in turns) <= WINDOW


def _figures(turns: list[object]) -> dict[str, int]:
    billed = cache_read = 0
    for rec in turns:
        usage = getattr(rec, "usage", None) or {}
        billed += sum(
            int(usage.get(k, 0))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        cache_read += int(usage.get("cache_read_input_tokens", 0))
    return {"requests": len(turns), "billed_prompt_tokens": billed, "cache_read_tokens": cache_read}
