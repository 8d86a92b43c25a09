"""`ctxgate run AGENT …` with the real agents: each one started by the command a user types,
against the simulator playing a scripted agent model, with nothing but the environment a user
has (the provider's base URL and key). Checked: the agent finishes its task, its exit code is
ctxgate's (0 here, and the same non-zero code it gives on its own when the provider refuses
it), every request the provider received came through ctxgate with the agent's own credential
and is valid, the session is in SQLite under the user's data directory, and the summary printed
at exit counts those requests.

Each agent runs when installed (scripts/install-*.sh) and fails instead of skipping under the
same variable its own tests use (CTXGATE_TEST_CODEX, CTXGATE_TEST_CLAUDE_CODE,
CTXGATE_TEST_AIDER, CTXGATE_TEST_GEMINI_CLI, CTXGATE_TEST_OPENCODE)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from proxy.edge.run.agents import launch
from storage import SessionStore
from tests.agents.aider import Aider, required_aider
from tests.agents.binaries import Finished, run_headless
from tests.agents.claude_code import ClaudeCode
from tests.agents.codex import required_codex
from tests.agents.gemini_cli import GeminiCli, required_gemini
from tests.agents.opencode import OpenCode, required_opencode
from tests.simulator import Fail, ModelSpec, ScriptedAgent, ShellAgent, Simulator

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^ctxgate: ([\d,]+) requests?(?: \([^)]*\))? through ctxgate; ", re.M)
ANTHROPIC_REFUSAL = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "messages: this request is refused"},
}
REFUSAL = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}


@dataclass(frozen=True, slots=True)
class Through:
    run: Finished
    data: Path  # XDG_DATA_HOME given to ctxgate

    @property
    def requests(self) -> int:
        """The request count of the summary ctxgate printed."""
        found = SUMMARY.findall(self.run.stderr)
        assert len(found) == 1, self.run.stderr[-3000:]
        return int(found[0].replace(",", ""))

    def sessions(self) -> list[str]:
        return asyncio.run(_session_keys(self.data / "ctxgate" / "ctxgate.db"))


async def _session_keys(db: Path) -> list[str]:
    assert db.exists(), db
    store = await SessionStore.open(f"sqlite+aiosqlite:///{db}")
    try:
        return [row.key for row in await store.list_sessions(limit=50)]
    finally:
        await store.close()


def ctxgate_run(
    argv: list[str], cwd: Path, env: Mapping[str, str], data: Path, timeout: float = 300
) -> Through:
    """`ctxgate run ARGV` as a user types it, with `env` (the user's environment)."""
    command = [sys.executable, "-m", "proxy.edge.cli", "run", *argv]
    environ = {**env, "XDG_DATA_HOME": str(data), "PYTHONPATH": str(REPO)}
    return Through(run_headless(command, cwd, environ, timeout, "ctxgate run"), data)


def _valid(sim: Simulator) -> None:
    problems = [p for r in sim.received for p in r.problems]
    assert problems == [], problems[:3]


# --- Codex ------------------------------------------------------------------------------------

CODEX_MODEL = "sim-codex"
CODEX_KEY = "sk-codex-user"


def codex_home(root: Path) -> Path:
    """The user's own Codex config: headless settings and a model, no provider for ctxgate
    (`ctxgate run` adds that on the command line; this file is never edited)."""
    home = root / "codex-home"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n'
        "check_for_update_on_startup = false\n\n"
        "[analytics]\nenabled = false\n"
    )
    return home


def codex_env(home: Path, upstream: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "TERM")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        CODEX_HOME=str(home),
        OPENAI_API_KEY=CODEX_KEY,
        OPENAI_BASE_URL=upstream,
        NO_COLOR="1",
        RUST_LOG="error",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


def codex_exec(binary: Path, workdir: Path) -> list[str]:
    return [
        str(binary),
        "exec",
        "--skip-git-repo-check",
        "--ephemeral",
        "--color",
        "never",
        "-C",
        str(workdir),
        "Run the numbered steps with the shell, one at a time.",
    ]


def test_codex_through_ctxgate_run(tmp_path: Path) -> None:
    binary = required_codex()
    home = codex_home(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with Simulator(models={CODEX_MODEL: ModelSpec(window=128_000)}) as sim:
        sim.responder = ShellAgent(turns=3)
        env = codex_env(home, sim.base_url)
        done = ctxgate_run(codex_exec(binary, work), work, env, tmp_path / "data")
        forwarded = sim.responses_requests
        _valid(sim)
        # The provider refuses the key: Codex's own exit code, then the same through ctxgate.
        sim.clear()
        sim.responder = lambda body: Fail(401, REFUSAL)
        direct = launch(codex_exec(binary, work), sim.url, env).argv  # pointed at the provider
        alone = run_headless(list(direct), work, env, 120, "codex")
        refused = ctxgate_run(codex_exec(binary, work), work, env, tmp_path / "data")
    assert done.run.exit_code == 0, done.run.output[-3000:]
    assert "Done: ran 3 steps" in done.run.stdout
    assert len(forwarded) >= 4
    assert {r.headers.get("authorization") for r in forwarded} == {f"Bearer {CODEX_KEY}"}
    assert done.requests == len(forwarded)
    assert len(done.sessions()) == 1
    assert alone.exit_code not in (0, None), alone.output[-2000:]
    assert refused.run.exit_code == alone.exit_code, refused.run.output[-3000:]
    assert refused.requests >= 1


# --- Claude Code ------------------------------------------------------------------------------

CLAUDE_MODEL = "claude-sonnet-4-5"
CLAUDE_KEY = "sk-ant-user-key"


def test_claude_code_through_ctxgate_run(tmp_path: Path) -> None:
    agent = ClaudeCode.required()
    home = tmp_path / "claude-home"
    (home / ".claude").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    spec = ModelSpec(window=200_000, dialect="anthropic")
    task = "Run the listing commands you are given and read their output."
    command = agent.command(task, CLAUDE_MODEL)
    with Simulator(models={CLAUDE_MODEL: spec}, default=spec) as sim:
        sim.responder = ScriptedAgent(turns=3, output_lines=20)
        # The user's environment: the provider's base URL (no /v1) and key.
        env = agent.environment(sim.url, CLAUDE_KEY, home, CLAUDE_MODEL)
        done = ctxgate_run(command, work, env, tmp_path / "data")
        forwarded = [r for r in sim.messages_requests if r.path.endswith("/messages")]
        _valid(sim)
        sim.clear()
        sim.responder = lambda body: Fail(400, ANTHROPIC_REFUSAL)  # not retried
        alone = run_headless(command, work, env, 120, "claude")
        refused = ctxgate_run(command, work, env, tmp_path / "data")
    assert done.run.exit_code == 0, done.run.output[-3000:]
    assert "Done: ran 3 commands" in done.run.stdout
    assert len(forwarded) >= 4
    assert {r.headers.get("x-api-key") for r in forwarded} == {CLAUDE_KEY}
    assert done.requests >= len(forwarded)  # count_tokens calls are counted too
    assert done.sessions()
    assert alone.exit_code not in (0, None), alone.output[-2000:]
    assert refused.run.exit_code == alone.exit_code, refused.run.output[-3000:]


# --- aider ------------------------------------------------------------------------------------

AIDER_MODEL = "sim-aider"


def aider_command(agent: Aider) -> list[str]:
    """aider's headless command without `--openai-api-base`: `ctxgate run` points it."""
    argv = agent.command("Say hello.", [], restore=False, history_tokens=1_000_000)
    at = argv.index("--openai-api-base")
    return argv[:at] + argv[at + 2 :]


def test_aider_through_ctxgate_run(tmp_path: Path) -> None:
    binary = required_aider()
    with Simulator(models={AIDER_MODEL: ModelSpec(window=32_000)}) as sim:
        agent = Aider("http://127.0.0.1:9/v1", AIDER_MODEL, tmp_path, window=32_000, binary=binary)
        env = agent.env() | {"OPENAI_API_BASE": sim.base_url}
        done = ctxgate_run(aider_command(agent), agent.workdir, env, tmp_path / "data", 180)
        forwarded = sim.chat_requests
        _valid(sim)
    assert done.run.exit_code == 0, done.run.output[-3000:]
    assert "ok: Say hello." in done.run.stdout
    assert len(forwarded) == 1
    assert forwarded[0].headers.get("authorization") == f"Bearer {agent.api_key}"
    assert done.requests == 1
    assert len(done.sessions()) == 1


# --- Gemini CLI -------------------------------------------------------------------------------

GEMINI_MODEL = "gemini-sim"
GEMINI_REFUSAL = {
    "error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT"}
}


def gemini_command(agent: GeminiCli) -> list[str]:
    return [
        str(agent.binary),
        "-p",
        "Run the numbered steps with the shell, one at a time.",
        "-m",
        GEMINI_MODEL,
        "--approval-mode",
        "yolo",
        "-o",
        "text",
        "--skip-trust",
    ]


def test_gemini_cli_through_ctxgate_run(tmp_path: Path) -> None:
    """The user's setup as Gemini CLI's headless mode needs it (`settings.json` selecting API-key
    auth), with no session header of their own: `ctxgate run` adds one."""
    binary = required_gemini()
    with Simulator(models={GEMINI_MODEL: ModelSpec(window=128_000)}) as sim:
        sim.responder = ShellAgent(turns=3)
        agent = GeminiCli(sim.url, GEMINI_MODEL, tmp_path, binary=binary)
        env = {k: v for k, v in agent.env().items() if k != "GEMINI_CLI_CUSTOM_HEADERS"}
        command = gemini_command(agent)
        done = ctxgate_run(command, agent.workdir, env, tmp_path / "data")
        forwarded = sim.gemini_requests
        _valid(sim)
        sim.clear()
        sim.responder = lambda body: Fail(400, GEMINI_REFUSAL)
        alone = run_headless(command, agent.workdir, env, 120, "gemini")
        refused = ctxgate_run(command, agent.workdir, env, tmp_path / "data")
    assert done.run.exit_code == 0, done.run.output[-3000:]
    assert "Done: ran 3 steps" in done.run.stdout
    assert len(forwarded) >= 4
    assert {r.headers.get("x-goog-api-key") for r in forwarded} == {agent.api_key}
    assert done.requests == len(forwarded)
    sessions = done.sessions()
    assert len(sessions) == 1 and sessions[0].startswith("ctxgate-run-"), sessions
    assert alone.exit_code not in (0, None), alone.output[-2000:]
    assert refused.run.exit_code == alone.exit_code, refused.run.output[-3000:]


# --- OpenCode ---------------------------------------------------------------------------------

OPENCODE_MODEL = "gpt-4.1"  # in OpenCode's bundled model list, so no models.dev fetch is needed


def test_opencode_through_ctxgate_run(tmp_path: Path) -> None:
    """The user's setup: their own `opencode.json` (in a scratch XDG config directory) and the
    provider's base URL in OPENAI_BASE_URL; `ctxgate run` points OpenCode's openai provider
    at itself through OPENCODE_CONFIG_CONTENT, and OpenCode speaks the Responses API."""
    binary = required_opencode()
    with Simulator(models={OPENCODE_MODEL: ModelSpec(window=128_000)}) as sim:
        sim.responder = ShellAgent(turns=3)
        agent = OpenCode(f"openai/{OPENCODE_MODEL}", tmp_path, binary=binary)
        env = agent.env() | {"OPENAI_BASE_URL": sim.base_url}
        command = agent.command("Run the numbered steps with the shell, one at a time.")
        done = ctxgate_run(command, agent.workdir, env, tmp_path / "data")
        forwarded = sim.responses_requests
        _valid(sim)
        sim.clear()
        sim.responder = lambda body: Fail(401, REFUSAL)
        direct = launch(command, sim.url, env)  # pointed at the provider
        alone = run_headless(list(direct.argv), agent.workdir, {**env, **direct.env}, 120, "oc")
        refused = ctxgate_run(command, agent.workdir, env, tmp_path / "data")
    user_config = agent.config_dir / "opencode.json"
    assert done.run.exit_code == 0, done.run.output[-3000:]
    assert "Done: ran 3 steps" in done.run.stdout
    assert len(forwarded) >= 4
    assert {r.headers.get("authorization") for r in forwarded} == {f"Bearer {agent.api_key}"}
    assert done.requests == len(forwarded)
    sessions = done.sessions()  # OpenCode's own session id (`x-session-id: ses_…`)
    assert len(sessions) == 1 and sessions[0].startswith("ses_"), sessions
    assert "baseURL" not in user_config.read_text()  # pointed without editing the user's file
    assert alone.exit_code not in (0, None), alone.output[-2000:]
    assert refused.run.exit_code == alone.exit_code, refused.run.output[-3000:]
    assert refused.requests >= 1
