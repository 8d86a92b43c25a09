"""Claude Code as a real client in tests: ``claude -p "task"`` headless against a base URL
(the provider simulator, or ctxgate in front of it), with a throw-away HOME so that no
configuration, session or credential leaks between runs or from the machine's user.

    agent = ClaudeCode.installed()            # None when scripts/install-claude-code.sh never ran
    run = agent.run("List the files", base_url=sim.url, model="claude-sim")
    run.exit_code, run.stdout, run.stderr, run.seconds
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.agents.binaries import Finished, run_headless

REPO = Path(__file__).resolve().parents[2]
PREFIX = REPO / ".agents"  # scripts/install-claude-code.sh installs here
BINARY = PREFIX / "node_modules" / ".bin" / "claude"

# The environment variables that could point the CLI elsewhere or change what it sends; the
# harness sets its own values or leaves them out.
_DROPPED = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
)


@dataclass(frozen=True, slots=True)
class ClaudeRun(Finished):
    command: list[str]


@dataclass
class ClaudeCode:
    """One installed ``claude`` binary and how to run it headless.

    tools        ``--tools`` value ("Bash" keeps the schema small; "default" for every tool)
    allowed      ``--allowedTools``: the tools that run without asking (the rest are denied)
    output       ``--output-format``: "text" (the answer), "json" (result, num_turns, usage)
    auth         "x-api-key" (ANTHROPIC_API_KEY) or "bearer" (ANTHROPIC_AUTH_TOKEN)
    extra_env    more environment variables (e.g. ENABLE_TOOL_SEARCH)
    """

    binary: Path = BINARY
    tools: str = "Bash"
    allowed: str = "Bash"
    output: str = "text"
    auth: str = "x-api-key"
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def installed(cls, **kwargs: object) -> ClaudeCode | None:
        binary = BINARY
        if not (binary.exists() and os.access(binary, os.X_OK)):
            return None
        return cls(binary=binary, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def required(cls) -> ClaudeCode:
        """Claude Code for a test: skipped without it, failed when CI installed it
        (CTXGATE_TEST_CLAUDE_CODE=1) and it is missing all the same."""
        agent = cls.installed()
        if agent is None:
            if os.environ.get("CTXGATE_TEST_CLAUDE_CODE") == "1":
                pytest.fail("CTXGATE_TEST_CLAUDE_CODE=1 but Claude Code is not installed")
            pytest.skip("Claude Code is not installed (scripts/install-claude-code.sh)")
        return agent

    def version(self) -> str:
        done = subprocess.run(
            [str(self.binary), "--version"], capture_output=True, text=True, timeout=60
        )
        return done.stdout.strip()

    def environment(self, base_url: str, api_key: str, home: Path, model: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
        env.update(
            HOME=str(home),
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            XDG_CONFIG_HOME=str(home / ".config"),
            ANTHROPIC_BASE_URL=base_url.rstrip("/"),
            # Every model role (the small/fast one included) goes to the same simulated model.
            ANTHROPIC_MODEL=model,
            ANTHROPIC_SMALL_FAST_MODEL=model,
            ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            CI="1",
        )
        env["ANTHROPIC_AUTH_TOKEN" if self.auth == "bearer" else "ANTHROPIC_API_KEY"] = api_key
        env.update(self.extra_env)
        return env

    def command(self, task: str, model: str) -> list[str]:
        return [
            str(self.binary),
            "-p",
            task,
            "--model",
            model,
            "--tools",
            self.tools,
            # Pre-approve the tools instead of --dangerously-skip-permissions, which the CLI
            # refuses to run as root (CI containers); "dontAsk" denies anything else unasked.
            "--allowedTools",
            self.allowed,
            "--permission-mode",
            "dontAsk",
            "--no-session-persistence",
            "--output-format",
            self.output,
        ]

    def run(
        self,
        task: str,
        *,
        base_url: str,
        model: str,
        api_key: str = "sk-ant-sim-test",
        timeout: float = 300.0,
        workdir: Path | None = None,
    ) -> ClaudeRun:
        """Run ``claude -p task`` to its end (or kill it at ``timeout``)."""
        with tempfile.TemporaryDirectory(prefix="claude-home-") as tmp:
            home = Path(tmp)
            (home / ".claude").mkdir()
            cwd = workdir if workdir is not None else home / "work"
            cwd.mkdir(parents=True, exist_ok=True)
            command = self.command(task, model)
            env = self.environment(base_url, api_key, home, model)
            done = run_headless(command, cwd, env, timeout, "claude")
            return ClaudeRun(done.exit_code, done.stdout, done.stderr, done.seconds, command)
