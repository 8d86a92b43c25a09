"""Codex CLI as a real client of the simulator's Responses API (no ctxgate in between): with the
scripted agent playing the model, ``codex exec`` runs more than 20 shell tool turns and exits 0,
and every request it sent was valid (calls paired, reasoning handed back unaltered).

Needs the binary from scripts/install-codex.sh; skipped without it, unless CTXGATE_TEST_CODEX=1
(then a missing binary fails the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.codex import Codex, required_codex
from tests.simulator import ModelSpec, Simulator
from tests.simulator.shell_agent import ShellAgent

TURNS = 22


def test_codex_exec_runs_tool_turns_against_the_simulator(tmp_path: Path) -> None:
    binary = required_codex()
    with Simulator(default=ModelSpec(window=128_000)) as sim:
        sim.responder = ShellAgent(turns=TURNS)
        codex = Codex(sim.base_url, "sim-codex", tmp_path, binary=binary)
        run = codex.exec("Run the numbered steps with the shell, one at a time.", timeout=240)
        received = sim.received
    assert run.exit_code == 0, run.stderr[-3000:]
    assert f"Done: ran {TURNS} steps" in run.stdout
    assert received and all(r.path == "/v1/responses" and r.method == "POST" for r in received)
    assert all(r.status == 200 and r.outcome == "reply" for r in received)
    assert [r.problems for r in received] == [[] for _ in received]
    last = received[-1].body["input"]
    outputs = [item for item in last if item.get("type") == "function_call_output"]
    assert len(outputs) == TURNS >= 20
    assert all("step" in str(item["output"]) for item in outputs)  # the commands really ran
    reasoning = [item for item in last if item.get("type") == "reasoning"]
    assert len(reasoning) == TURNS and all(item.get("encrypted_content") for item in reasoning)
    first = received[0]
    assert first.headers["session-id"] == first.body["prompt_cache_key"]
    assert first.body["stream"] is True and first.body["store"] is False
    assert [r.prompt_tokens or 0 for r in received] == sorted(
        r.prompt_tokens or 0 for r in received
    )


@pytest.mark.parametrize("stream_errors", ["status", "event"])
def test_codex_stops_at_the_simulators_overflow_in_either_form(
    tmp_path: Path, stream_errors: str
) -> None:
    """The overflow the simulator sends (a 400, or response.failed in a 200 stream) is one Codex
    recognises: it does not retry and exits 1 (what ctxgate must prevent)."""
    binary = required_codex()
    with Simulator(default=ModelSpec(window=16_000, stream_errors=stream_errors)) as sim:
        sim.responder = ShellAgent(turns=40)
        codex = Codex(sim.base_url, "sim-codex", tmp_path, binary=binary)
        run = codex.exec("Run the numbered steps with the shell, one at a time.", timeout=240)
        received = sim.received
    assert run.exit_code == 1
    assert "ran out of room in the model's context window" in run.stderr
    assert [r.outcome for r in received[-2:]] == ["reply", "overflow"]
    assert received[-1].status == (400 if stream_errors == "status" else 200)
    assert (received[-1].prompt_tokens or 0) > 16_000 >= (received[-2].prompt_tokens or 0)
