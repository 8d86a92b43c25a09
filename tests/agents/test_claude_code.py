"""Claude Code as a real client: `claude -p` through ctxgate against the simulator at a 16K
window, for 20+ tool turns, with at least one compression (runs when the binary is installed;
CTXGATE_TEST_CLAUDE_CODE=1 makes a missing binary a failure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.agents.claude_code import ClaudeCode
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.agent import ScriptedAgent
from tests.simulator.anthropic_prompt import count_messages_tokens
from tests.simulator.recall_first import RecallFirst

# A model name this CLI sends thinking "enabled" to, so signed thinking blocks cross ctxgate.
MODEL = "claude-sonnet-4-5"
WINDOW = 16_384
TURNS = 22


def test_claude_code_runs_through_ctxgate(tmp_path: Path) -> None:
    agent = ClaudeCode.required()
    run, received, recorder = _run(agent, ScriptedAgent(turns=TURNS, output_lines=60), tmp_path)
    turns = [r for r in received if r.path.endswith("/messages") and not r.is_summary]
    summaries = [r for r in received if r.is_summary]
    problems = [p for r in received for p in r.problems]
    report = _figures(turns, summaries, recorder.bodies)
    print(f"claude code through ctxgate: {report}")
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert not problems, problems[:3]
    assert sum(1 for r in turns if r.outcome == "reply") >= TURNS
    assert summaries, "no compression happened"
    assert any(
        block.get("type") == "thinking"
        for rec in turns
        for message in rec.messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
    ), "no signed thinking block crossed ctxgate"
    assert max(r.prompt_tokens or 0 for r in turns) <= WINDOW
    assert report["billed_prompt_tokens"] < report["uncompressed_prompt_tokens"]
    assert report["cache_read_after_compression"] > 0


def _run(agent: ClaudeCode, responder: Any, tmp_path: Path) -> tuple[Any, list[Any], BodyRecorder]:
    """Claude Code through ctxgate against the simulator playing `responder`: the run, what
    the provider received, what Claude Code sent."""
    with Simulator(
        models={MODEL: ModelSpec(window=WINDOW, dialect="anthropic")},
        default=ModelSpec(window=WINDOW, dialect="anthropic"),
    ) as sim:
        sim.responder = responder
        settings = settings_for(
            sim.url + "/v1",
            str(tmp_path / "ctxgate.db"),
            api_key=None,
            models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
            upstreams={"sim": {"base_url": sim.url + "/v1", "apis": ["chat", "messages"]}},
        )
        proxy = ProxyServer(settings)
        recorder = BodyRecorder(proxy.app)
        proxy.server.config.app = recorder
        with proxy:
            run = agent.run(
                "Run the listing commands you are given and read their output.",
                base_url=f"http://127.0.0.1:{proxy.port}",
                model=MODEL,
            )
        return run, sim.received, recorder


class BodyRecorder:
    """ASGI wrapper keeping the bodies Claude Code posted to `/v1/messages` (what it sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/messages":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recording() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.bodies.append(b"".join(chunks))
            return message

        await self.app(scope, recording, send)


def _figures(turns: list[Any], summaries: list[Any], bodies: list[bytes]) -> dict[str, int]:
    """Prompt tokens billed through ctxgate (the provider's usage) against what Claude Code's
    own requests would have cost, and the cache reads once a compression was made."""
    first_summary = min((r.at for r in summaries), default=float("inf"))
    billed = cache_read = 0
    for rec in turns:
        usage = rec.usage or {}
        billed += sum(
            int(usage.get(k, 0))
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        if rec.at > first_summary:
            cache_read += int(usage.get("cache_read_input_tokens", 0))
    sent = [json.loads(b) for b in bodies]
    return {
        "tool_turns": sum(1 for r in turns if r.outcome == "reply") - 1,
        "requests": len(turns),
        "overflow_retries": sum(1 for r in turns if r.outcome == "overflow"),
        "compressions": len(summaries),
        "billed_prompt_tokens": billed,
        "uncompressed_prompt_tokens": sum(count_messages_tokens(b) for b in sent),
        "cache_read_after_compression": cache_read,
    }


def test_claude_code_never_sees_ctxgate_recall(tmp_path: Path) -> None:
    """After a compression the model reads archived originals back through ctxgate's recall
    tool on every other request (signed thinking on); Claude Code gets only its own calls."""
    agent = ClaudeCode.required()
    model = RecallFirst(ScriptedAgent(turns=16, output_lines=60))
    run, received, recorder = _run(agent, model, tmp_path)
    assert run.exit_code == 0, (run.stdout[-2000:], run.stderr[-2000:])
    assert not [p for r in received for p in r.problems]
    assert model.answers, "the model never read the archive"
    assert all(answer.startswith("m") for answer in model.answers), model.answers[:2]
    assert not any(b"ctxgate_recall" in body for body in recorder.bodies)
