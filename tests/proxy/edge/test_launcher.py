"""`ctxgate run`: the agent table (pure), the embedded server's zero-config settings, the
summary's figures, and the real command run end to end with a small Python program as the
agent: its exit code and signals pass through, its requests cross ctxgate to the simulator with
the user's own credential, the session lands in SQLite under the user's data directory, and
the summary printed at exit counts what happened."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from proxy.config_file import parse_settings
from proxy.edge.cli import build_parser
from proxy.edge.run.agents import AGENTS, OTHER, agent_for, gemini_headers, launch
from proxy.edge.run.embedded import data_dir, run_document
from proxy.edge.run.figures import Figures, read_figures, summary
from proxy.edge.run.launcher import attached_base, exit_code
from session.config.environment import upstreams_document
from session.metrics import Metrics
from storage import SessionStore
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

BASE = "http://127.0.0.1:4321"

# --- the agent table --------------------------------------------------------------------------


def test_claude_code_is_pointed_by_its_base_url_and_keeps_its_arguments() -> None:
    plan = launch(["claude", "-p", "hi"], BASE + "/", {"ANTHROPIC_API_KEY": "sk-ant-user"})
    assert plan.argv == ("claude", "-p", "hi")
    assert plan.env == {"ANTHROPIC_BASE_URL": BASE}  # no /v1: Claude Code appends it
    assert agent_for("/opt/tools/claude").provider == "anthropic"


def codex_config(argv: tuple[str, ...]) -> dict[str, object]:
    """The `-c key=value` overrides as Codex reads them (each value is TOML)."""
    overrides: dict[str, object] = {}
    for flag, pair in zip(argv, argv[1:], strict=False):
        if flag == "-c":
            key, _, value = pair.partition("=")
            overrides[key] = tomllib.loads(f"v = {value}")["v"]
    return overrides


def test_codex_gets_a_provider_for_ctxgate_on_its_command_line() -> None:
    plan = launch(["codex", "exec", "fix it"], BASE, {"OPENAI_API_KEY": "sk-user"})
    assert plan.argv[0] == "codex" and plan.argv[-2:] == ("exec", "fix it")
    assert plan.env == {}
    assert codex_config(plan.argv) == {
        "model_provider": "ctxgate",
        "model_providers.ctxgate.name": "ctxgate",
        "model_providers.ctxgate.base_url": f"{BASE}/v1",
        "model_providers.ctxgate.wire_api": "responses",
        "model_providers.ctxgate.supports_websockets": False,
        "model_providers.ctxgate.env_key": "OPENAI_API_KEY",
    }
    # Without a key in the environment, Codex sends the one its own login keeps.
    logged_in = codex_config(launch(["codex"], BASE, {}).argv)
    assert logged_in["model_providers.ctxgate.requires_openai_auth"] is True
    assert "model_providers.ctxgate.env_key" not in logged_in


def test_aider_gets_the_litellm_base_variables() -> None:
    plan = launch(["aider", "--model", "openai/x"], BASE, {})
    assert plan.argv == ("aider", "--model", "openai/x")
    assert plan.env["OPENAI_API_BASE"] == f"{BASE}/v1"
    assert plan.env["ANTHROPIC_API_BASE"] == BASE


def test_opencode_config_content_is_merged_over_the_users() -> None:
    theirs = {"provider": {"openai": {"options": {"timeout": 5}}}, "theme": "dark"}
    plan = launch(["opencode", "run", "x"], BASE, {"OPENCODE_CONFIG_CONTENT": json.dumps(theirs)})
    config = json.loads(plan.env["OPENCODE_CONFIG_CONTENT"])
    assert config["theme"] == "dark"
    assert config["provider"]["openai"]["options"] == {"timeout": 5, "baseURL": f"{BASE}/v1"}
    assert config["provider"]["anthropic"]["options"] == {"baseURL": f"{BASE}/v1"}
    unreadable = launch(["opencode"], BASE, {"OPENCODE_CONFIG_CONTENT": "{oops"})
    assert json.loads(unreadable.env["OPENCODE_CONFIG_CONTENT"])["provider"]


def test_gemini_cli_gets_its_base_url_and_a_session_header() -> None:
    plan = launch(["gemini", "-p", "x"], BASE, {})
    assert plan.env["GOOGLE_GEMINI_BASE_URL"] == BASE
    name, _, session = plan.env["GEMINI_CLI_CUSTOM_HEADERS"].partition(": ")
    assert name == "X-Ctxgate-Session-Id" and session.startswith("ctxgate-run-")
    assert gemini_headers({"GEMINI_CLI_CUSTOM_HEADERS": "X-A: 1"}, "s1") == (
        "X-A: 1, X-Ctxgate-Session-Id: s1"
    )
    theirs = "x-ctxgate-session-id: mine, X-A: 1"
    assert gemini_headers({"GEMINI_CLI_CUSTOM_HEADERS": theirs}, "s1") == theirs


def test_an_unknown_command_gets_every_providers_variable() -> None:
    assert agent_for("my-tool") is OTHER
    plan = launch(["my-tool", "--flag"], BASE, {})
    assert plan.env == {
        "OPENAI_BASE_URL": f"{BASE}/v1",
        "OPENAI_API_BASE": f"{BASE}/v1",
        "ANTHROPIC_BASE_URL": BASE,
        "GOOGLE_GEMINI_BASE_URL": BASE,
    }
    with pytest.raises(ValueError):
        launch([], BASE, {})


def test_the_table_holds_each_agent_the_readme_names() -> None:
    assert set(AGENTS) == {"claude", "codex", "aider", "opencode", "gemini"}


# --- the embedded server's settings -----------------------------------------------------------


def test_data_directory_follows_xdg() -> None:
    assert data_dir({"XDG_DATA_HOME": "/x/data", "HOME": "/h"}) == Path("/x/data/ctxgate")
    assert data_dir({"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/share/ctxgate")
    assert data_dir({"HOME": "/h"}) == Path("/h/.local/share/ctxgate")


def test_upstreams_come_from_the_usual_variables_without_keys() -> None:
    env = {
        "OPENAI_BASE_URL": "http://o.example/v1",
        "ANTHROPIC_BASE_URL": "http://a.example/",
        "OPENAI_API_KEY": "sk-user",
    }
    ups = upstreams_document(env, keys=False)
    assert ups["openai"] == {"base_url": "http://o.example/v1", "apis": ["chat", "responses"]}
    assert ups["anthropic"] == {"base_url": "http://a.example/v1", "apis": ["messages"]}
    defaults = upstreams_document({}, keys=False)
    assert defaults["openai"]["base_url"] == "https://api.openai.com/v1"
    assert defaults["anthropic"]["base_url"] == "https://api.anthropic.com/v1"
    assert upstreams_document({"OPENAI_API_BASE": "http://b/v1"}, keys=False)["openai"][
        "base_url"
    ] == ("http://b/v1")
    gemini = upstreams_document({"GOOGLE_GEMINI_BASE_URL": "http://g.example"}, keys=False)[
        "gemini"
    ]
    assert gemini == {"base_url": "http://g.example/v1beta", "apis": ["gemini"]}
    assert defaults["gemini"]["base_url"] == ("https://generativelanguage.googleapis.com/v1beta")


def test_other_model_names_go_to_the_agents_provider(tmp_path: Path) -> None:
    document = run_document({}, tmp_path, "anthropic", port=5, admin_key="k")
    settings = parse_settings(document, {})
    assert settings.storage.url == f"sqlite+aiosqlite:///{tmp_path / 'ctxgate.db'}"
    assert settings.auth.admin_key == "k" and settings.auth.keys == ()
    assert all(up.api_key is None for up in settings.upstreams.values())
    rule = settings.rule_for("my-private-model")
    assert rule is not None and rule.upstream == "anthropic"
    codex = parse_settings(run_document({}, tmp_path, "openai", port=5, admin_key="k"), {})
    routes = [codex.rule_for(m) for m in ("gpt-5", "claude-opus-4", "gemini-2.5-pro")]
    assert [rule.upstream if rule else None for rule in routes] == [
        "openai",
        "anthropic",
        "gemini",
    ]
    gemini = parse_settings(run_document({}, tmp_path, "gemini", port=5, admin_key="k"), {})
    rule = gemini.rule_for("my-tuned-model")
    assert rule is not None and rule.upstream == "gemini"


# --- the figures and the summary --------------------------------------------------------------


def test_figures_are_read_from_the_metrics_ctxgate_renders() -> None:
    metrics = Metrics()
    for status in (200, 200, 200, 400):
        metrics.finished(status)
    metrics.compression("post_response", "compressed", 12_000, 3_000)
    metrics.compression("overflow", "fallback", 9_000, 4_000)
    metrics.recalled("search", 250)
    metrics.overflow()
    before = read_figures(metrics.render().decode())
    assert before == Figures(
        requests=4,
        errors=1,
        compressions=2,
        tokens_before=21_000,
        tokens_after=7_000,
        recall_calls=1,
        recall_tokens=250,
        overflows=1,
    )
    metrics.finished(200)
    metrics.compression("post_response", "skipped", 0, 0)
    later = read_figures(metrics.render().decode()).since(before)
    assert later == Figures(requests=1)


def test_billed_and_uncompressed_figures_come_from_the_ledger_counters() -> None:
    metrics = Metrics()
    for kind, tier, tokens in (
        ("request", "uncached", 3_000),
        ("request", "cache_read", 9_000),
        ("request", "output", 500),  # not a prompt figure
        ("summary", "uncached", 4_000),  # priced below, not a client request's prompt
    ):
        metrics.billed_tokens.labels("m", kind, tier).inc(tokens)
    metrics.full_tokens.labels("m", "cache_read").inc(40_000)
    metrics.billed_usd.labels("m", "request").inc(0.25)
    metrics.billed_usd.labels("m", "summary").inc(0.05)
    metrics.full_usd.labels("m").inc(1.5)
    figures = read_figures(metrics.render().decode())
    assert (figures.billed_prompt_tokens, figures.full_prompt_tokens) == (12_000, 40_000)
    assert (round(figures.billed_usd, 6), figures.full_usd) == (0.3, 1.5)
    text = summary(figures, agent="codex", code=0, where=[])
    assert "ctxgate: prompt tokens billed: 12,000, 40,000 without compression\n" in text
    assert "ctxgate: cost: $0.3000, $1.5000 without compression" in text


def test_the_summary_names_each_figure() -> None:
    figures = Figures(requests=24, compressions=2, tokens_before=30_000, tokens_after=8_000)
    text = summary(figures, agent="claude", code=0, where=["dashboard: http://x/dashboard"])
    assert text.splitlines() == [
        "ctxgate: claude exited with code 0",
        "ctxgate: 24 requests through ctxgate; 2 compressions, 22,000 tokens cut from the "
        "context; 0 recall calls",
        "ctxgate: dashboard: http://x/dashboard",
    ]
    assert "ended by signal 15" in summary(Figures(), agent="a", code=143, where=[])


def test_exit_codes_follow_the_shell() -> None:
    assert [exit_code(c) for c in (0, 3, -15, -9)] == [0, 3, 143, 137]
    assert attached_base("http://h:1/v1/") == attached_base("http://h:1") == "http://h:1"


# --- the real command -------------------------------------------------------------------------

AGENT = """\
import json, os, sys, time, urllib.request

base = os.environ["OPENAI_BASE_URL"]
for n in range(int(sys.argv[1])):
    body = {"model": "sim-model", "messages": [{"role": "user", "content": f"step {n}"}]}
    request = urllib.request.Request(
        base + "/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": "Bearer sk-the-users-own",
         "x-session-id": "launcher-test"},
    )
    print(json.loads(urllib.request.urlopen(request).read())["choices"][0]["message"]["content"])
if len(sys.argv) > 3:
    open(sys.argv[3], "w").close()
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""


def agent_script(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def environment(tmp_path: Path, sim: Simulator) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(
        XDG_DATA_HOME=str(tmp_path / "data"), OPENAI_BASE_URL=sim.base_url, NO_PROXY="127.0.0.1"
    )
    return env


def ctxgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy.edge.cli", "run", *args]


async def session_rows(db: Path) -> list[str]:
    store = await SessionStore.open(f"sqlite+aiosqlite:///{db}")
    try:
        return [row.key for row in await store.list_sessions(limit=10)]
    finally:
        await store.close()


def test_the_agent_runs_through_an_embedded_ctxgate(tmp_path: Path) -> None:
    import asyncio

    script = agent_script(tmp_path)
    with Simulator() as sim:
        done = subprocess.run(
            ctxgate(sys.executable, str(script), "3", "7"),
            env=environment(tmp_path, sim),
            capture_output=True,
            text=True,
            timeout=120,
        )
        received = sim.chat_requests
    assert done.returncode == 7, done.stderr
    assert done.stdout.splitlines() == ["ok: step 0", "ok: step 1", "ok: step 2"]
    assert [r.headers.get("authorization") for r in received] == ["Bearer sk-the-users-own"] * 3
    db = tmp_path / "data" / "ctxgate" / "ctxgate.db"
    assert asyncio.run(session_rows(db)) == ["launcher-test"]
    lines = [line.removeprefix("ctxgate: ") for line in done.stderr.splitlines()]
    at = lines.index(f"{Path(sys.executable).name} exited with code 7")
    assert lines[at + 1] == "3 requests through ctxgate; 0 compressions; 0 recall calls"
    billed = sum(r.prompt_tokens or 0 for r in received)
    assert f"prompt tokens billed: {billed}, {billed} without compression" in lines
    dashboard = r"dashboard: http://127\.0\.0\.1:\d+/dashboard while ctxgate runs \(admin key \S+\)"
    assert any(re.fullmatch(dashboard, line) for line in lines), lines
    assert lines[-1].startswith(f"sessions: {db}; log: ")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_to_ctxgate_reaches_the_agent(tmp_path: Path, signum: int) -> None:
    """No terminal here: a signal sent to ctxgate alone is passed on, and the agent's death by
    it is ctxgate's exit code (128 + N), with the summary printed all the same."""
    script = agent_script(tmp_path)
    ready = tmp_path / "ready"
    with Simulator() as sim:
        proc = subprocess.Popen(
            ctxgate(sys.executable, str(script), "1", "0", str(ready)),
            env=environment(tmp_path, sim),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # away from pytest's terminal
            # As from a terminal: a suite started in the background (`pytest &`) inherits
            # SIGINT ignored, and so would ctxgate and the agent, rightly.
            preexec_fn=_default_sigint,
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    assert f"ended by signal {signum}" in stderr
    assert "1 request through ctxgate" in stderr


def test_attach_uses_a_running_ctxgate(tmp_path: Path) -> None:
    script = agent_script(tmp_path)
    with Simulator() as sim:
        settings = settings_for(sim.base_url, str(tmp_path / "shared.db"), api_key=None)
        with ProxyServer(settings) as proxy:
            done = subprocess.run(
                ctxgate("--attach", proxy.base_url, sys.executable, str(script), "2", "0"),
                env=environment(tmp_path, sim) | {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
                capture_output=True,
                text=True,
                timeout=120,
            )
        received = sim.chat_requests
    assert done.returncode == 0, done.stderr
    assert len(received) == 2
    assert "2 requests through ctxgate" in done.stderr
    assert f"dashboard: http://127.0.0.1:{proxy.port}/dashboard" in done.stderr
    assert not (tmp_path / "data").exists()  # nothing embedded was started


def test_a_missing_agent_is_reported_like_a_shell_would(tmp_path: Path) -> None:
    with Simulator() as sim:
        done = subprocess.run(
            ctxgate("no-such-agent-here"),
            env=environment(tmp_path, sim),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 127
    assert "no-such-agent-here: command not found" in done.stderr


def test_everything_after_the_agent_is_the_agents() -> None:
    parsed = build_parser().parse_args(["run", "--port", "9", "codex", "-c", "a=1", "--help"])
    assert (parsed.agent, parsed.args, parsed.port) == ("codex", ["-c", "a=1", "--help"], 9)
    parsed = build_parser().parse_args(["run", "--attach", "http://h:1", "claude", "--port", "3"])
    assert (parsed.attach, parsed.args, parsed.port) == ("http://h:1", ["--port", "3"], None)
