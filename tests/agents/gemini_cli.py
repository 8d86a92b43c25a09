"""Gemini CLI as a real client in tests: a scratch HOME whose ``~/.gemini/settings.json`` selects
API-key auth (without it a base URL selects the `gateway` auth type, which headless mode refuses
with "Invalid auth method selected.", exit 41), ``GOOGLE_GEMINI_BASE_URL`` pointing at a base URL
(the simulator, or ctxgate in front of it), and ``gemini -p`` run headless in a scratch work
directory with a timeout.

API-key mode sends no session id: the runs add one with ``GEMINI_CLI_CUSTOM_HEADERS``.

Install the binary with ``scripts/install-gemini-cli.sh`` (it lands in ``.agents/gemini-cli``,
with a Node of its own under ``bin/`` where the system's is older than 20)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.agents.binaries import AgentRun, agent_binary, required_binary, run_headless

REPO = Path(__file__).resolve().parents[2]
PREFIX = REPO / ".agents" / "gemini-cli"
INSTALLED = PREFIX / "node_modules" / ".bin" / "gemini"
FLAG = "CTXGATE_TEST_GEMINI_CLI"


def gemini_binary() -> Path | None:
    """gemini installed by scripts/install-gemini-cli.sh, else one on PATH."""
    return agent_binary(INSTALLED, "gemini")


def required_gemini() -> Path:
    """The gemini binary for a test (skipped, or failed under CTXGATE_TEST_GEMINI_CLI=1,
    without it)."""
    return required_binary(INSTALLED, "gemini", FLAG, "scripts/install-gemini-cli.sh")


def settings_json() -> dict[str, object]:
    """API-key auth, no usage statistics (they go to Google, not the base URL), no update
    check, and the CLI's own compression left to ctxgate (its threshold: a share of 1M)."""
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "model": {"compressionThreshold": 0.9},
        "telemetry": {"enabled": False},
    }


class GeminiCli:
    """One Gemini CLI setup: ``home`` (its HOME, with ``.gemini/settings.json``) and runs in
    ``workdir``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        root: Path,
        *,
        binary: Path | None = None,
        api_key: str = "gemini-cli-test-key",
        session: str = "gemini-cli-run",
    ) -> None:
        found = binary or gemini_binary()
        if found is None:
            raise FileNotFoundError("gemini is not installed: run scripts/install-gemini-cli.sh")
        self.binary = found
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self.session = session
        self.home = root / "gemini-home"
        self.workdir = root / "work"
        (self.home / ".gemini").mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.home / ".gemini" / "settings.json").write_text(json.dumps(settings_json()))

    def env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "TERM")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        node = PREFIX / "bin"  # the install script's own Node, where the system's is too old
        if node.is_dir():
            env["PATH"] = f"{node}:{env.get('PATH', '/usr/bin:/bin')}"
        env.update(
            {
                "HOME": str(self.home),
                "GEMINI_API_KEY": self.api_key,
                "GOOGLE_GEMINI_BASE_URL": self.base_url,
                "GEMINI_CLI_CUSTOM_HEADERS": f"X-Ctxgate-Session-Id: {self.session}",
                "GEMINI_CLI_TRUST_WORKSPACE": "true",
                "NO_COLOR": "1",
                "CI": "1",
                "NO_PROXY": "127.0.0.1,localhost",
            }
        )
        return env

    def prompt(self, task: str, timeout: float = 300.0) -> AgentRun:
        """``gemini -p`` the task headless (tools approved, text output); a timeout kills it
        and reports exit code -9."""
        command = [
            str(self.binary),
            "-p",
            task,
            "-m",
            self.model,
            "--approval-mode",
            "yolo",
            "-o",
            "text",
            "--skip-trust",
        ]
        done = run_headless(command, self.workdir, self.env(), timeout, "gemini")
        code = -9 if done.exit_code is None else done.exit_code
        return AgentRun(code, done.stdout, done.stderr, done.seconds, self.workdir)
