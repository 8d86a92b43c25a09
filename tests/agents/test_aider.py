"""aider as a real client of ctxgate, against the simulator's 8K-token OpenAI-dialect model.

A ~3,300-token file added to the chat over successive aider runs (each restores the chat history
and resends it): aider's own history outgrows the window, ctxgate compresses it, every request
the provider received still holds the whole file, and aider applies every answer's edit (a new
file per step, in its SEARCH/REPLACE format). When the file grows to 17,700 tokens after two
steps it cannot fit at all: the provider's own `context_length_exceeded` reaches aider, which
prints its token-limit advice, and the provider never received a request without the file.

aider is told the true window (its model metadata) but keeps its own history summarizer out of
reach, so that ctxgate is what keeps the conversation in; with `--yes-always` it sends past its
own size warning.

Needs aider from scripts/install-aider.sh; skipped without it, unless CTXGATE_TEST_AIDER=1
(then a missing binary fails the test)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from proxy.edge.app import create_app
from tests.agents.aider import Aider, required_aider
from tests.compression.aider import source_file
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Reply, Simulator, count_prompt_tokens, is_summary_request

WINDOW = 8192
MODEL = "sim-aider-8k"
STEPS = 6
ASK = re.compile(r"Step (\d+):")


def ask(step: int) -> str:
    return f"Step {step}: add a step_{step} entry point next to app.py."


def step_source(step: int) -> str:
    return f"def step_{step}(request):\n    return handler_{step}(request, retries={step})\n"


def edit_answer(step: int) -> str:
    """An answer in aider's diff edit format: a new file `step_<n>.py`, and enough prose that
    the history outgrows the window in a few steps."""
    notes = "\n".join(
        f"- handler_{n} already retries with base {n % 7}; step {step} leaves it alone."
        for n in range(60)
    )
    return (
        f"Step {step} goes in a module of its own; app.py stays as it is.\n\n{notes}\n\n"
        f"step_{step}.py\n```python\n<<<<<<< SEARCH\n=======\n{step_source(step)}"
        ">>>>>>> REPLACE\n```\n"
    )


def answer_steps(body: dict[str, Any]) -> Reply | None:
    if is_summary_request(body):
        return None  # the simulator's own summarizer answers
    users = [m for m in body["messages"] if m.get("role") == "user"]
    asked = ASK.match(str(users[-1].get("content"))) if users else None
    return Reply(content=edit_answer(int(asked.group(1))) if asked else "Ok.")


def forwarded(sim: Simulator) -> list[list[dict[str, Any]]]:
    return [r.messages for r in sim.chat_requests if not r.is_summary]


def holds(view: list[dict[str, Any]], text: str) -> bool:
    return any(text in str(m.get("content")) for m in view)


def compressed(view: list[dict[str, Any]]) -> bool:
    return holds(view, "CONTEXT COMPACTION")


def ctxgate_app(sim: Simulator, db_path: Path) -> Recorder:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    settings = settings_for(sim.base_url, str(db_path), models=models)
    return Recorder(create_app(settings), "/v1/chat/completions")


def test_aiders_file_stays_whole_while_ctxgate_compresses_its_history(tmp_path: Path) -> None:
    binary = required_aider()
    file_text = source_file(3300) + "\n"
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True) as sim:
        sim.responder = answer_steps
        recorder = ctxgate_app(sim, tmp_path / "ctxgate.db")
        with ThreadedServer(recorder, name="ctxgate", lifespan="on") as proxy:
            agent = Aider(
                f"http://127.0.0.1:{proxy.port}/v1", MODEL, tmp_path, window=WINDOW, binary=binary
            )
            (agent.workdir / "app.py").write_text(file_text)
            runs = [agent.run(ask(step), ["app.py"]) for step in range(1, STEPS + 1)]
        views = forwarded(sim)
        replies = [r for r in sim.chat_requests if not r.is_summary]
        summaries = [r for r in sim.chat_requests if r.is_summary]
    for run in runs:
        assert run.exit_code == 0, run.output[-3000:]
    # aider got every answer whole: each step's edit was applied
    for step in range(1, STEPS + 1):
        assert step_source(step) in (agent.workdir / f"step_{step}.py").read_text()
    assert (agent.workdir / "app.py").read_text() == file_text
    assert len(views) == len(recorder.bodies) == STEPS
    assert all(r.outcome == "reply" for r in replies)
    # aider's requests outgrew the window; what reached the provider did not
    sent = [count_prompt_tokens(orjson.loads(body)) for body in recorder.bodies]
    assert max(sent) > WINDOW > max(r.prompt_tokens or 0 for r in replies)
    assert summaries and sum(compressed(view) for view in views) >= 2
    assert [n for n, view in enumerate(views) if not holds(view, file_text)] == []
    report = {
        "steps": STEPS,
        "compressed_requests": sum(compressed(view) for view in views),
        "summary_calls": len(summaries),
        "sent_prompt_tokens": sent,
        "billed_prompt_tokens": [r.prompt_tokens for r in replies],
        "aider_seconds": [round(run.seconds, 1) for run in runs],
    }
    print("aider through ctxgate:", orjson.dumps(report).decode())


def test_a_file_grown_past_the_window_gets_aiders_token_limit_advice(tmp_path: Path) -> None:
    """Two steps with a small app.py, then it grows to 17,700 tokens: a history ctxgate could
    summarize the file into, but the provider's refusal is what must reach aider."""
    binary = required_aider()
    file_text = source_file(17_700) + "\n"
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True) as sim:
        sim.responder = answer_steps
        recorder = ctxgate_app(sim, tmp_path / "ctxgate.db")
        with ThreadedServer(recorder, name="ctxgate", lifespan="on") as proxy:
            agent = Aider(
                f"http://127.0.0.1:{proxy.port}/v1", MODEL, tmp_path, window=WINDOW, binary=binary
            )
            (agent.workdir / "app.py").write_text(source_file(300) + "\n")
            runs = [agent.run(ask(step), ["app.py"]) for step in (1, 2)]
            (agent.workdir / "app.py").write_text(file_text)
            runs.append(agent.run(ask(3), ["app.py"]))
        late = [r for r in sim.chat_requests if not r.is_summary][2:]
    assert [run.exit_code for run in runs] == [0, 0, 0], runs[-1].output[-3000:]
    assert (agent.workdir / "step_2.py").exists()
    # what aider prints on litellm's ContextWindowExceededError
    output = runs[-1].output
    assert f"Model openai/{MODEL} has hit a token limit!" in output, output[-3000:]
    assert "Use /drop to remove unneeded files from the chat session." in output
    assert not (agent.workdir / "step_3.py").exists()
    assert late, "the provider was never asked"
    assert all(r.outcome == "overflow" for r in late)
    # never a request that lacks the file: whatever reached the provider held all of it
    assert all(holds(r.messages, file_text) for r in late)
