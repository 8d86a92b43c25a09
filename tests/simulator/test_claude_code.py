"""Claude Code as a real client of the simulator's Messages dialect (no ctxgate in between):
``claude -p`` runs the scripted agent's tool rounds to the end and exits 0.

Runs when ``scripts/install-claude-code.sh`` installed the CLI; skipped otherwise, except that
``CTXGATE_TEST_CLAUDE_CODE=1`` (CI) turns a missing CLI into a failure."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.agents.claude_code import ClaudeCode
from tests.simulator import (
    ModelSpec,
    Received,
    ScriptedAgent,
    Simulator,
    is_claude_code_compaction,
)
from tests.simulator.fixtures import simulator_fixture

ROUNDS = 22
MODEL = "claude-sonnet-5-5"  # what this CLI version's "sonnet" alias names
OLDER_MODEL = "claude-sonnet-4-5"  # sends thinking "enabled" (the simulator then checks more)
TASK = "Run the listing commands one after another, then report what you saw."


@pytest.fixture(scope="module")
def claude() -> ClaudeCode:
    agent = ClaudeCode.installed()
    if agent is None:
        reason = "Claude Code is not installed (run scripts/install-claude-code.sh)"
        if os.environ.get("CTXGATE_TEST_CLAUDE_CODE") == "1":
            pytest.fail(f"CTXGATE_TEST_CLAUDE_CODE=1 but {reason}")
        pytest.skip(reason)
    return agent


sim = simulator_fixture(default=ModelSpec(window=200_000))


def tool_results(requests: list[Received]) -> set[str]:
    """The ids of every tool_result block that reached the simulator."""
    return {
        str(block.get("tool_use_id"))
        for rec in requests
        for message in rec.messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def breakpoints(body: dict[str, Any]) -> int:
    blocks = list(body.get("tools") or []) + list(body.get("system") or [])
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks.extend(content if isinstance(content, list) else [])
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def test_claude_code_runs_twenty_tool_rounds_against_the_simulator(
    claude: ClaudeCode, sim: Simulator
) -> None:
    sim.responder = ScriptedAgent(turns=ROUNDS)
    run = claude.run(TASK, base_url=sim.url, model=MODEL, timeout=240)
    assert run.exit_code == 0, run.stderr[-2000:]
    assert f"Done: ran {ROUNDS} commands" in run.stdout
    turns = sim.messages_requests
    assert len(turns) == ROUNDS + 1
    assert len(tool_results(turns)) >= 20
    assert all(r.status == 200 and r.problems == [] for r in turns)
    last = turns[-1].messages[-1]["content"][0]
    assert last["type"] == "tool_result" and "line 21001 of the listing" in str(last["content"])
    first = turns[0]
    session = first.headers["x-claude-code-session-id"]
    assert json.loads(first.body["metadata"]["user_id"])["session_id"] == session
    assert first.headers["anthropic-version"] and first.headers["anthropic-beta"]
    assert first.headers["x-api-key"] == "sk-ant-sim-test"
    assert "Bash" in [t["name"] for t in first.body["tools"]]
    assert all(1 <= breakpoints(r.body) <= 4 for r in turns)
    reads = [r.usage["cache_read_input_tokens"] for r in turns[1:] if r.usage]
    assert len(reads) == ROUNDS and min(reads) > 0  # each turn reads the previous turn's prefix


def test_claude_code_sends_a_bearer_token_with_auth_token(
    claude: ClaudeCode, sim: Simulator
) -> None:
    sim.responder = ScriptedAgent(turns=1)
    sim.required_api_key = "sk-ant-bearer"
    bearer = ClaudeCode(binary=claude.binary, auth="bearer")
    run = bearer.run(
        TASK, base_url=sim.url, model=OLDER_MODEL, api_key="sk-ant-bearer", timeout=120
    )
    assert run.exit_code == 0, run.stderr[-2000:]
    turns = sim.messages_requests
    assert len(turns) == 2 and len(tool_results(turns)) == 1
    assert all(r.headers["authorization"] == "Bearer sk-ant-bearer" for r in turns)


@pytest.mark.parametrize("stream_errors", ["status", "event"])
def test_claude_code_compacts_by_itself_when_the_provider_says_prompt_too_long(
    claude: ClaudeCode, stream_errors: str
) -> None:
    """What a client does without ctxgate: on the provider's overflow (a 400, or an error event
    in a 200 stream, which it retries without streaming) it asks the model for a summary and
    goes on with a shortened history."""
    small = ModelSpec(window=6_000, count_max_tokens=False, stream_errors=stream_errors)
    with Simulator(default=small) as sim:
        sim.responder = ScriptedAgent(turns=ROUNDS)
        run = claude.run(TASK, base_url=sim.url, model=MODEL, timeout=240)
        turns = sim.messages_requests
    assert run.exit_code == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"Done: ran {ROUNDS} commands" in run.stdout
    overflows = [r for r in turns if r.outcome == "overflow"]
    assert overflows and all(r.prompt_tokens and r.prompt_tokens > 6_000 for r in overflows)
    if stream_errors == "event":
        assert {(r.status, r.stream) for r in overflows} == {(200, True), (400, False)}
    assert any(is_claude_code_compaction(r.body) for r in turns)
    assert all(r.problems == [] for r in turns)
