"""OpenCode as a real client of ctxgate: `opencode run` runs more than 20 shell tool turns
through ctxgate (its openai provider's `baseURL`, so the Responses API) against the simulator at
a 16K window, exits 0, and ctxgate compresses its history on the way while every request the
provider received stays valid.

OpenCode's own fixed part (system prompt and tool schemas, about 7K tokens) leaves about 9K of
a 16K window for the conversation; each step adds about 940 tokens, so the history outgrows the
window around the tenth step. OpenCode believes the model's window is gpt-4.1's 1M (from its
bundled model list, the context limit the test's config keeps), so it never compacts by
itself: keeping the history in is ctxgate's job.

OpenCode runs with a scratch HOME and XDG directories (tests/agents/opencode.py), never the
user's own config. Needs the binary from scripts/install-opencode.sh; skipped without it,
unless CTXGATE_TEST_OPENCODE=1 (then a missing binary fails the test)."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.edge.app import create_app
from session.identity import scope_for
from storage import SessionKey
from tests.agents.opencode import OpenCode, required_opencode
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.responses_items import count_input_tokens, input_items
from tests.simulator.shell_agent import ShellAgent

TURNS = 22
WINDOW = 16_384
MODEL = "gpt-4.1"  # in OpenCode's bundled model list
COMMAND = 'echo "step {n}"; seq -s " " {n}000 {n}300'
TASK = "Run the numbered steps with the shell, one at a time."


def test_opencode_run_through_ctxgate_at_a_16k_window(tmp_path: Path) -> None:
    binary = required_opencode()
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        agent = ShellAgent(turns=TURNS, command=COMMAND)
        sim.responder = agent
        settings = settings_for(sim.base_url, str(tmp_path / "ctxgate.db"), models=models)
        recorder = Recorder(create_app(settings), "/v1/responses")
        with ThreadedServer(recorder, name="ctxgate", lifespan="on") as proxy:
            # OpenCode asks for gpt-4.1's whole output limit (32K, more than the window) unless
            # told a smaller one; the context limit stays 1M so it never compacts by itself.
            limit = (1_000_000, 2_048)
            opencode = OpenCode(f"openai/{MODEL}", tmp_path, binary=binary, limit=limit)
            base = f"http://127.0.0.1:{proxy.port}/v1"
            run = opencode.run(TASK, base, timeout=400)
            store = recorder.app.state.services.store
            scope = scope_for(opencode.api_key)
            rows = proxy.run(store.list_sessions(scope=scope))
            keys = [row.key for row in rows]
            detail = proxy.run(store.session_detail(SessionKey(scope, keys[0]))) if keys else None
        forwarded = sim.responses_requests
        seal = sim.responses.seal
        summaries = [r for r in sim.received if r.is_summary]
    assert run.exit_code == 0, (run.stdout + run.stderr)[-3000:]
    assert f"Done: ran {TURNS} steps" in run.stdout
    assert list(agent.issued().values()) == [TURNS]
    assert [r.problems for r in forwarded] == [[] for _ in forwarded]
    assert all(r.status == 200 and r.outcome == "reply" for r in forwarded)
    assert len(keys) == 1 and keys[0].startswith("ses_"), keys  # OpenCode's x-session-id
    outcomes = [event.outcome for event in detail.events] if detail is not None else []
    assert outcomes.count("compressed") >= 1, outcomes
    assert summaries
    # The agent turns (with tools): what the provider billed against OpenCode's own history.
    client = [orjson.loads(body) for body in recorder.bodies]
    turns = [i for i, body in enumerate(client) if body.get("tools")]
    uncompressed = [count_input_tokens(client[i], input_items(client[i]), seal) for i in turns]
    replies = [r for r in forwarded if not r.is_summary and r.body.get("tools")]
    billed = [r.prompt_tokens or 0 for r in replies]
    assert len(billed) == len(uncompressed) == TURNS + 1
    assert max(billed) < WINDOW < max(uncompressed)
    report = {
        "turns": TURNS,
        "requests": len(forwarded),
        "compressions": outcomes.count("compressed"),
        "summary_calls": len(summaries),
        "billed_prompt_tokens": sum(billed),
        "uncompressed_prompt_tokens": sum(uncompressed),
        "largest_billed": max(billed),
        "largest_uncompressed": max(uncompressed),
    }
    print("opencode through ctxgate:", orjson.dumps(report).decode())
    assert sum(billed) < sum(uncompressed)
