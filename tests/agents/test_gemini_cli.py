"""Gemini CLI as a real client of ctxgate: `gemini -p` runs more than 20 shell tool turns through
ctxgate's Gemini door against the simulator's Gemini dialect at a 24K window, exits 0, and
ctxgate compresses its history on the way while every request the provider received stays valid
(calls and responses paired, every thought signature the provider issued sent back intact).
Without ctxgate the same run overflows: Google's 400 "input token count exceeds", exit code 1
(a single `-p` run never compresses by itself: the CLI splits its history only at user turns).

Gemini CLI's fixed part (system instruction and 15 tool declarations) is about 8.5K tokens; each
step's output about 1K, so the history outgrows the window around the fifteenth step.

Needs the binary from scripts/install-gemini-cli.sh; skipped without it, unless
CTXGATE_TEST_GEMINI_CLI=1 (then a missing binary fails the test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from proxy.edge.app import create_app
from session.identity import scope_for
from storage import SessionKey
from tests.agents.gemini_cli import GeminiCli, required_gemini
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.gemini_wire import chat_body
from tests.simulator.shell_agent import ShellAgent
from tests.simulator.tokens import count_prompt_tokens

TURNS = 22
WINDOW = 24_576
MODEL = "gemini-sim-24k"
COMMAND = 'echo "step {n}"; seq -s " " {n}000 {n}300'
TASK = "Run the numbered steps with the shell, one at a time."
SESSION = "gemini-cli-run"
KEY = "gemini-cli-test-key"
PATH = f"/v1beta/models/{MODEL}:streamGenerateContent"


@contextmanager
def through_ctxgate(
    sim: Simulator, tmp_path: Path, binary: Path, window: int
) -> Iterator[tuple[GeminiCli, ThreadedServer, Recorder]]:
    """Gemini CLI pointed at a real ctxgate (whose config gives the model `window`) in front of
    `sim`; the recorder keeps what the CLI sent."""
    settings = settings_for(
        sim.gemini_url,
        str(tmp_path / "ctxgate.db"),
        api_key=None,
        models=[{"match": "*", "upstream": "sim", "context_length": window}],
        upstreams={"sim": {"base_url": sim.gemini_url, "apis": ["gemini"], "timeout_s": 60}},
    )
    recorder = Recorder(create_app(settings), PATH)
    with ThreadedServer(recorder, name="ctxgate", lifespan="on") as proxy:
        cli = GeminiCli(
            f"http://127.0.0.1:{proxy.port}", MODEL, tmp_path, binary=binary, session=SESSION
        )
        yield cli, proxy, recorder


def _signatures(body: dict[str, Any]) -> dict[str, str]:
    """Each signed call's signature, by call id."""
    return {
        p["functionCall"]["id"]: p["thoughtSignature"]
        for c in body.get("contents") or []
        if c.get("role") == "model"
        for p in c.get("parts") or []
        if "functionCall" in p and "thoughtSignature" in p
    }


@pytest.mark.parametrize("configured", [WINDOW, 1_048_576], ids=["window-known", "window-unknown"])
def test_gemini_cli_through_ctxgate_at_a_24k_window(tmp_path: Path, configured: int) -> None:
    """With the window unknown to ctxgate, Google's overflow error (which states the window)
    is what tells it; it is recovered from before the CLI sees a byte."""
    binary = required_gemini()
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        agent = ShellAgent(turns=TURNS, command=COMMAND)
        sim.responder = agent
        with through_ctxgate(sim, tmp_path, binary, configured) as (cli, proxy, recorder):
            run = cli.prompt(TASK, timeout=500)
            services = recorder.app.state.services
            detail = proxy.run(services.store.session_detail(SessionKey(scope_for(KEY), SESSION)))
        forwarded = sim.gemini_requests
        summaries = [r for r in forwarded if r.is_summary]
        turns = [r for r in forwarded if not r.is_summary]
    assert run.exit_code == 0, run.stderr[-3000:]
    assert f"Done: ran {TURNS} steps" in run.stdout
    # The CLI ran every step: its own history answers each of the calls, one per step.
    client_bodies = [json.loads(body) for body in recorder.bodies]
    answered = [
        p["functionResponse"]["id"]
        for c in client_bodies[-1]["contents"]
        for p in c["parts"]
        if "functionResponse" in p
    ]
    assert [i.split("_")[1] for i in answered] == [f"step{n:03d}" for n in range(1, TURNS + 1)]
    assert max(agent.issued().values()) == TURNS
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    refused = [r for r in turns if r.outcome != "reply"]
    assert all(r.outcome == "overflow" and r.status == 400 for r in refused)
    assert (configured == WINDOW) == (not refused)
    turns = [r for r in turns if r.outcome == "reply"]
    outcomes = [event.outcome for event in detail.events] if detail is not None else []
    assert outcomes.count("compressed") >= 1, outcomes
    assert summaries
    # The signatures the provider saw again are the ones the CLI holds, every one of them.
    held = _signatures(client_bodies[-1])
    seen = [_signatures(r.body) for r in turns]
    assert all(held[call] == signature for sent in seen for call, signature in sent.items())
    assert all(sent for sent in seen[1:])  # every turn after the first carries signed calls
    uncompressed = [count_prompt_tokens(chat_body(b, MODEL)) for b in client_bodies]
    billed = [r.prompt_tokens or 0 for r in turns]
    assert len(billed) == len(uncompressed) > TURNS
    assert max(billed) <= WINDOW < max(uncompressed)
    report = {
        "window": WINDOW,
        "configured_window": configured,
        "overflows_recovered": len(refused),
        "tool_turns": TURNS,
        "requests": len(turns),
        "compressions": outcomes.count("compressed"),
        "summary_calls": len(summaries),
        "largest_billed": max(billed),
        "largest_uncompressed": max(uncompressed),
        "seconds": round(run.seconds, 1),
    }
    print("gemini cli through ctxgate:", json.dumps(report))


def test_gemini_cli_alone_overflows_at_a_24k_window(tmp_path: Path) -> None:
    """The same run straight at the provider: Google's overflow error, exit code 1."""
    binary = required_gemini()
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        sim.responder = ShellAgent(turns=TURNS, command=COMMAND)
        cli = GeminiCli(sim.url, MODEL, tmp_path, binary=binary, session=SESSION)
        run = cli.prompt(TASK, timeout=300)
        forwarded = sim.gemini_requests
    assert run.exit_code == 1, (run.exit_code, run.stderr[-3000:])
    assert forwarded[-1].outcome == "overflow" and forwarded[-1].status == 400
    assert sum(1 for r in forwarded if r.outcome == "overflow") == 1  # a 400 is not retried
    assert "exceeds the maximum number of tokens allowed" in run.stdout + run.stderr
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
