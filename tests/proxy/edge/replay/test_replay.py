"""`ctxgate replay`: every format through the session path `serve` runs, and its figures
against a live run of the same requests through a real ctxgate and the provider simulator."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config_file import load_settings
from proxy.edge.cli import main
from proxy.edge.replay.figures import SessionFigures
from proxy.edge.replay.progress import ProgressBar
from proxy.edge.replay.readers.formats import read_paths
from proxy.edge.replay.readers.recording import Recording
from proxy.edge.replay.runner import ReplayOptions, replay_all
from tests.servers import ProxyServer, settings_for
from tests.simulator import (
    Fail,
    ModelSpec,
    Reply,
    Simulator,
    ThinkingSigner,
    is_summary_request,
)
from tests.simulator.responses_items import Seal

DATA = Path(__file__).parents[3] / "data" / "replay"
RECORDED = next((DATA / "codex_recorded").glob("rollout-*.jsonl"))  # by Codex 0.171, on the sim
SEAL_KEY = b"ctxgate replay fixture seal key!"
CLAUDE_RECORDED = next((DATA / "claude_code_recorded").glob("*.jsonl"))  # by Claude Code
PATH_OF = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}
WINDOW = 6000  # the fixtures' conversation is ~8K tokens at its end: it must be compressed
PATHS = {
    "claude-code": DATA / "claude_code",
    "codex": DATA / "codex",
    "gemini-cli": next((DATA / "gemini_cli").rglob("session-*.json")),
    "opencode": DATA / "opencode" / "storage",
    "plain-chat": DATA / "plain" / "chat.json",
    "plain-responses": DATA / "plain" / "responses.jsonl",
}


def _replay(recordings: list[Recording], **options: Any) -> list[SessionFigures]:
    opts = ReplayOptions(**{"window": WINDOW, **options})
    return asyncio.run(replay_all(load_settings(None, {}), recordings, opts))


@pytest.mark.parametrize("fmt", sorted(PATHS))
def test_each_format_is_compressed_to_fit_the_window(fmt: str) -> None:
    (session,) = _replay(read_paths([str(PATHS[fmt])]))
    assert session.errors == 0
    assert len(session.requests) >= 10
    sent_over, forwarded_over = session.over_window
    assert sent_over > 0 and forwarded_over == 0
    assert [o for _, o in session.compressions if o == "fallback"]  # no summary model given
    assert session.with_ctxgate.prompt < session.without.prompt
    # Until the first compression, ctxgate forwards what the agent sent.
    first = session.requests[0]
    assert first.forwarded == first.original and first.billed == first.direct
    kept, users = session.users_in_view
    assert users > 0 and kept == users  # the task stays in view
    assert session.edits == 2  # the conversation edits a file twice after reading it
    assert session.price is not None and session.usd(session.without) is not None


def test_a_larger_window_leaves_the_session_alone() -> None:
    (session,) = _replay(read_paths([str(PATHS["codex"])]), window=None)  # the model's 400K
    assert session.window == 400_000
    assert session.compressions == []
    assert all(r.forwarded == r.original for r in session.requests)
    assert session.with_ctxgate == session.without


def test_the_cache_tiers_follow_each_api() -> None:
    claude, codex = _replay(read_paths([str(PATHS["claude-code"]), str(PATHS["codex"])]))
    # Anthropic: the breakpoint's prefix is read, the rest written; nothing uncached.
    assert claude.without.cache_read > 0 and claude.without.cache_write > 0
    assert claude.without.uncached == 0
    # OpenAI: automatic caching, in 128-token steps, nothing written.
    assert codex.without.cache_read > 0 and codex.without.cache_write == 0
    assert all(r.direct.cache_read % 128 == 0 for r in codex.requests)


def test_the_command_prints_a_table_json_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "report.html"
    code = main(["replay", str(PATHS["claude-code"]), "--window", str(WINDOW), "--html", str(html)])
    assert code == 0
    out = capsys.readouterr().out
    assert "claude-code" in out and "→" in out and "fallback" in out
    page = html.read_text()
    assert "<svg" in page and "<script" not in page and "polyline" in page
    assert main(["replay", str(PATHS["codex"]), "--window", str(WINDOW), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (session,) = data["sessions"]
    assert session["source"] == "codex" and session["with"]["prompt"] < session["without"]["prompt"]
    assert len(session["prompt_tokens"]) == session["requests"]


def test_the_command_refuses_a_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "notes.json"
    other.write_text('{"hello": "world"}')
    assert main(["replay", str(other)]) == 2
    assert "notes.json" in capsys.readouterr().err


def test_a_db_keeps_the_replayed_sessions(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    assert main(["replay", str(PATHS["codex"]), "--window", str(WINDOW), "--db", str(db)]) == 0
    assert db.stat().st_size > 0


# --- against a live run through serve ----------------------------------------------------


def _answer(body: dict[str, Any]) -> Reply | Fail:
    """The simulator as the replay's double: summaries fail (ctxgate falls back to its own),
    every other request gets a short answer."""
    return Fail(500) if is_summary_request(body) else Reply(content="ok")


async def _settled(proxy: ProxyServer) -> None:
    jobs = proxy.services.sessions.jobs
    while jobs:
        await asyncio.gather(*list(jobs.values()), return_exceptions=True)


def _live(recording: Recording, db_path: str) -> tuple[list[int], int]:
    """What the simulator billed for each request a real ctxgate forwarded, and how many
    compressions ctxgate stored."""
    spec = ModelSpec(
        window=128_000, dialect="anthropic" if recording.api == "messages" else "openai"
    )
    with Simulator({recording.model: spec}) as sim:
        sim.responses.seal = Seal(SEAL_KEY)  # the key the recorded reasoning was sealed with
        sim.messages_api.signer = ThinkingSigner(SEAL_KEY)  # and the thinking signed with
        sim.responder = _answer
        models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
        upstream = {"base_url": sim.base_url, "apis": ["chat", "responses", "messages"]}
        settings = settings_for(
            sim.base_url, db_path, models=models, api_key=None, upstreams={"sim": upstream}
        )
        with ProxyServer(settings) as proxy:
            with httpx.Client(timeout=30) as client:
                for body in recording.bodies:
                    answer = client.post(
                        f"{proxy.base_url}/{PATH_OF[recording.api]}",
                        json=body,
                        headers={
                            "x-session-id": "live",
                            "x-api-key": "sk-live",
                            "anthropic-version": "2023-06-01",
                        },
                    )
                    assert answer.status_code == 200, answer.text
                    proxy.run(_settled(proxy))
        asked = [r for r in sim.received if r.path.endswith(PATH_OF[recording.api])]
        billed = [r.prompt_tokens or 0 for r in asked if not r.is_summary]
        summaries = sum(1 for r in sim.received if r.is_summary)
    return billed, summaries


@pytest.mark.parametrize(
    "path", [RECORDED, CLAUDE_RECORDED, PATHS["opencode"]], ids=["codex", "claude-code", "opencode"]
)
def test_replay_matches_a_live_run_through_serve_within_one_percent(
    path: Path, db_path: str
) -> None:
    """A session replayed, and its requests sent live through a real ctxgate to the provider
    simulator: the prompt tokens the provider is billed for agree within 1%, request by request
    and in total."""
    (recording,) = read_paths([str(path)])
    recording = recording.with_model("gpt-4o")  # the simulator counts with o200k_base
    live, live_summaries = _live(recording, db_path)
    (replayed,) = _replay([recording])
    forwarded = [r.forwarded or 0 for r in replayed.requests]
    assert len(live) == len(forwarded)
    assert live_summaries == len([c for c in replayed.compressions if c[1] == "fallback"])
    print(f"{path.name}: replay {sum(forwarded)} live {sum(live)} prompt tokens forwarded")
    assert abs(sum(forwarded) - sum(live)) <= 0.01 * sum(live)
    for ours, theirs in zip(forwarded, live, strict=True):
        assert abs(ours - theirs) <= 0.01 * theirs
    assert min(forwarded) < max(r.original for r in replayed.requests)  # it did compress


def test_a_configured_summary_model_writes_the_summaries(tmp_path: Path) -> None:
    """With `--summary-model`, summary calls go to the configured upstream serving it (here
    the simulator) and are billed with ctxgate; the session's requests still reach no one."""
    with Simulator({"summary-model": ModelSpec(window=128_000)}) as sim:
        config = tmp_path / "ctxgate.yaml"
        config.write_text(
            "upstreams:\n"
            f"  sim: {{base_url: '{sim.base_url}', api_key: sk-sim}}\n"
            "models:\n"
            "  - {match: 'summary-*', upstream: sim}\n"
        )
        (session,) = asyncio.run(
            replay_all(
                load_settings(str(config)),
                read_paths([str(PATHS["codex"])]),
                ReplayOptions(window=WINDOW, summary_model="summary-model", configured=True),
            )
        )
        received = sim.received
    assert received and all(r.is_summary and r.model == "summary-model" for r in received)
    assert len(session.summaries) == len(received)
    outcomes = {o for _, o in session.compressions}
    assert "compressed" in outcomes and "fallback" not in outcomes
    billed = sum(r.billed.prompt for r in session.requests)
    assert session.with_ctxgate.prompt == billed + sum(s.prompt for s in session.summaries)


RECORDED_BY_AGENTS = {
    "claude-code": (CLAUDE_RECORDED, 12_000),
    "codex": (RECORDED, 8_000),
    "gemini-cli": (next((DATA / "gemini_cli_recorded").glob("session-*.jsonl")), 3_000),
    "opencode": (DATA / "opencode_recorded" / "opencode.db", 3_000),
}


@pytest.mark.parametrize("agent", sorted(RECORDED_BY_AGENTS))
def test_sessions_the_agents_wrote_replay_within_the_window(agent: str) -> None:
    path, window = RECORDED_BY_AGENTS[agent]
    (session,) = _replay(read_paths([str(path)]), window=window)
    assert session.source == agent and session.errors == 0
    sent_over, forwarded_over = session.over_window
    assert sent_over > 0 and forwarded_over == 0
    assert session.compressions and session.with_ctxgate.prompt < session.without.prompt
    kept, users = session.users_in_view
    assert 0 < kept <= users


def test_the_progress_bar_counts_sessions_and_requests() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, 2)
    for n in range(1, 4):
        bar("first", n, 3)
    bar("second", 1, 1)
    bar.close()
    text = stream.getvalue()
    assert "[replay 1/2] first" in text and "3/3 requests" in text
    assert "[replay 2/2] second" in text and "1/1 requests" in text
    assert text.endswith("\r\x1b[K")
