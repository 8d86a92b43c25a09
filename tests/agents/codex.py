"""Codex CLI as a real client in tests: a CODEX_HOME whose config.toml points a custom model
provider at a base URL (the simulator, or ctxgate in front of it), and ``codex exec`` run
headless in a scratch work directory with a timeout.

Install the binary with ``scripts/install-codex.sh`` (it lands in ``.agents/codex``)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.agents.binaries import AgentRun, agent_binary, required_binary, run_headless

REPO = Path(__file__).resolve().parents[2]
INSTALLED = REPO / ".agents" / "codex" / "node_modules" / ".bin" / "codex"
API_KEY_ENV = "CTXGATE_CODEX_API_KEY"


def codex_binary() -> Path | None:
    """codex installed by scripts/install-codex.sh, else one on PATH."""
    return agent_binary(INSTALLED, "codex")


def required_codex() -> Path:
    """The codex binary for a test (skipped, or failed under CTXGATE_TEST_CODEX=1, without it)."""
    return required_binary(INSTALLED, "codex", "CTXGATE_TEST_CODEX", "scripts/install-codex.sh")


def config_toml(
    base_url: str,
    model: str,
    *,
    context_window: int | None = None,
    auto_compact_tokens: int | None = None,
) -> str:
    """A config.toml with one custom provider (Responses wire API, plain HTTP streaming, no
    retries so a failure shows at once) and settings for headless runs without a sandbox."""
    lines = [
        f'model = "{model}"',
        'model_provider = "ctxgate"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        'model_reasoning_summary = "auto"',
        "check_for_update_on_startup = false",
        "hide_agent_reasoning = false",
    ]
    if context_window is not None:
        lines.append(f"model_context_window = {context_window}")
    if auto_compact_tokens is not None:
        lines.append(f"model_auto_compact_token_limit = {auto_compact_tokens}")
    lines += [
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[model_providers.ctxgate]",
        'name = "ctxgate"',
        f'base_url = "{base_url}"',
        f'env_key = "{API_KEY_ENV}"',
        'wire_api = "responses"',
        "supports_websockets = false",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "stream_idle_timeout_ms = 60000",
    ]
    return "\n".join(lines) + "\n"


class Codex:
    """One Codex CLI setup: ``home`` (CODEX_HOME, written here) and runs in ``workdir``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        root: Path,
        *,
        binary: Path | None = None,
        api_key: str = "sk-codex-test",
        context_window: int | None = None,
        auto_compact_tokens: int | None = None,
    ) -> None:
        found = binary or codex_binary()
        if found is None:
            raise FileNotFoundError("codex is not installed: run scripts/install-codex.sh")
        self.binary = found
        self.api_key = api_key
        self.home = root / "codex-home"
        self.workdir = root / "work"
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = config_toml(
            base_url,
            model,
            context_window=context_window,
            auto_compact_tokens=auto_compact_tokens,
        )
        (self.home / "config.toml").write_text(self.config)

    def env(self) -> dict[str, str]:
        keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "TERM")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            {
                "CODEX_HOME": str(self.home),
                API_KEY_ENV: self.api_key,
                "NO_COLOR": "1",
                "RUST_LOG": "error",
                # no proxy between Codex and loopback, whatever the caller's environment says
                "NO_PROXY": "127.0.0.1,localhost",
            }
        )
        return env

    def exec(self, task: str, timeout: float = 300.0) -> AgentRun:
        """``codex exec`` the task headless; a timeout kills it and reports exit code -9."""
        command = [
            str(self.binary),
            "exec",
            "--strict-config",  # a setting this version does not know fails the run
            "--skip-git-repo-check",
            "--ephemeral",
            "--color",
            "never",
            "-C",
            str(self.workdir),
            task,
        ]
        done = run_headless(command, self.workdir, self.env(), timeout, "codex")
        code = -9 if done.exit_code is None else done.exit_code
        return AgentRun(code, done.stdout, done.stderr, done.seconds, self.workdir)
