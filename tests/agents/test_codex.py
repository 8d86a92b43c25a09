"""Codex CLI as a real client of ctxgate: `codex exec` runs more than 20 shell tool turns through
ctxgate against the simulator at a 16K window, exits 0, and ctxgate compresses its history on the
way while every request the provider received stays valid (calls paired, reasoning unaltered).

Codex's own fixed part (tool schemas and two developer items, about 10K tokens) leaves about 6K
of a 16K window for the conversation; each step's output is about 700 tokens, so the history
outgrows the window around the tenth step and ctxgate has to keep it in. The provider reports
an overflow the way OpenAI's Responses API does in a stream: `response.failed` after a 200,
with no figures; run once with the window in ctxgate's config and once without it.

Needs the binary from scripts/install-codex.sh; skipped without it, unless CTXGATE_TEST_CODEX=1
(then a missing binary fails the test)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from proxy.edge.app import create_app
from session.identity import scope_for
from storage import SessionKey
from tests.agents.codex import Codex, required_codex
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.recall_first import RecallFirst
from tests.simulator.responses_items import count_input_tokens, input_items
from tests.simulator.shell_agent import ShellAgent

TURNS = 24
WINDOW = 16_384
MODEL = "sim-codex-16k"
COMMAND = 'echo "step {n}"; seq -s " " {n}000 {n}300'


@contextmanager
def through_ctxgate(
    sim: Simulator, tmp_path: Path, binary: Path, window: int
) -> Iterator[tuple[Codex, ThreadedServer, Recorder]]:
    """Codex pointed at a real ctxgate (whose config gives the model `window`) in front of
    `sim`; the recorder keeps what Codex sent."""
    models = [{"match": "*", "upstream": "sim", "context_length": window}]
    settings = settings_for(sim.base_url, str(tmp_path / "ctxgate.db"), models=models)
    recorder = Recorder(create_app(settings), "/v1/responses")
    with ThreadedServer(recorder, name="ctxgate", lifespan="on") as proxy:
        yield (
            Codex(
                f"http://127.0.0.1:{proxy.port}/v1",
                MODEL,
                tmp_path,
                binary=binary,
                context_window=1_000_000,  # Codex must not compact by itself: ctxgate does
            ),
            proxy,
            recorder,
        )


@pytest.mark.parametrize("configured", [WINDOW, 128_000], ids=["window-known", "window-unknown"])
def test_codex_exec_through_ctxgate_at_a_16k_window(tmp_path: Path, configured: int) -> None:
    """With the window unknown to ctxgate, the provider's `response.failed` overflows (inside a
    200 stream, without figures) are what tell it; each is recovered before Codex sees a byte."""
    binary = required_codex()
    spec = ModelSpec(window=WINDOW, stream_errors="event")
    with Simulator(models={MODEL: spec}) as sim:
        agent = ShellAgent(turns=TURNS, command=COMMAND)
        sim.responder = agent
        with through_ctxgate(sim, tmp_path, binary, configured) as (codex, proxy, recorder):
            run = codex.exec("Run the numbered steps with the shell, one at a time.", timeout=400)
            services = recorder.app.state.services
            assert recorder.bodies, run.stderr[-3000:]
            session = orjson.loads(recorder.bodies[0])["prompt_cache_key"]
            detail = proxy.run(
                services.store.session_detail(SessionKey(scope_for("sk-codex-test"), session))
            )
        forwarded = sim.responses_requests
        seal = sim.responses.seal
        summaries = [r for r in sim.received if r.is_summary]
    assert run.exit_code == 0, run.stderr[-3000:]
    assert f"Done: ran {TURNS} steps" in run.stdout
    assert list(agent.issued().values()) == [TURNS]
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    replies = [r for r in forwarded if r.outcome == "reply"]
    refused = [r for r in forwarded if r.outcome != "reply"]
    assert all(r.status == 200 for r in forwarded)  # an overflow, too, comes in a 200 stream
    assert all(r.outcome == "overflow" for r in refused)
    assert (configured == WINDOW) == (not refused)
    outcomes = [event.outcome for event in detail.events] if detail is not None else []
    assert outcomes.count("compressed") >= 1, outcomes
    assert summaries
    # What the provider billed against what Codex's uncompressed history would have cost.
    client_bodies = [orjson.loads(body) for body in recorder.bodies]
    uncompressed = [count_input_tokens(b, input_items(b), seal) for b in client_bodies]
    billed = [r.prompt_tokens or 0 for r in replies]
    assert len(billed) == len(uncompressed) >= TURNS
    assert max(billed) < WINDOW < max(uncompressed)
    report = {
        "configured_window": configured,
        "overflows_recovered": len(refused),
        "turns": TURNS,
        "requests": len(replies),
        "compressions": outcomes.count("compressed"),
        "summary_calls": len(summaries),
        "billed_prompt_tokens": sum(billed),
        "uncompressed_prompt_tokens": sum(uncompressed),
        "largest_billed": max(billed),
        "largest_uncompressed": max(uncompressed),
    }
    print("codex through ctxgate:", orjson.dumps(report).decode())
    assert sum(billed) < sum(uncompressed)


def test_codex_never_sees_ctxgate_recall(tmp_path: Path) -> None:
    """Once the history is compressed, the model reads back archived originals through
    ctxgate's recall tool on every other request; Codex gets only its own tool calls (a call
    to a tool it does not know would come back in its next request's input)."""
    binary = required_codex()
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        agent = RecallFirst(ShellAgent(turns=16, command=COMMAND))
        sim.responder = agent
        with through_ctxgate(sim, tmp_path, binary, WINDOW) as (codex, _, recorder):
            run = codex.exec("Run the numbered steps with the shell, one at a time.", timeout=400)
        forwarded = sim.responses_requests
    assert run.exit_code == 0, run.stderr[-3000:]
    assert "Done: ran 16 steps" in run.stdout
    assert agent.answers, "the model never read the archive"
    assert all(re.match(r"m\d+ \(", answer) for answer in agent.answers), agent.answers[:2]
    assert not any(b"ctxgate_recall" in body for body in recorder.bodies)
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
