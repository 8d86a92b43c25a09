"""OpenCode as a real client in tests: a scratch HOME and XDG directories (so the user's own
``~/.config/opencode``, ``~/.local/share/opencode`` and the rest are never read or written),
an ``opencode.json`` there that allows every tool without asking and turns off updates, sharing
and the models.dev fetch, and ``opencode run`` executed headless in a scratch work directory
with a timeout.

OpenCode is pointed at a base URL through ``OPENCODE_CONFIG_CONTENT`` (the provider's
``options.baseURL``), the way ``ctxgate run opencode`` points it; a test of ``ctxgate run``
leaves that variable out and lets ctxgate set it.

Install the binary with ``scripts/install-opencode.sh`` (it lands in ``.agents/opencode``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.agents.binaries import AgentRun, agent_binary, required_binary, run_headless

REPO = Path(__file__).resolve().parents[2]
INSTALLED = REPO / ".agents" / "opencode" / "node_modules" / ".bin" / "opencode"
FLAG = "CTXGATE_TEST_OPENCODE"


def opencode_binary() -> Path | None:
    """opencode installed by scripts/install-opencode.sh, else one on PATH."""
    return agent_binary(INSTALLED, "opencode")


def required_opencode() -> Path:
    """The opencode binary for a test (skipped, or failed under CTXGATE_TEST_OPENCODE=1,
    without it)."""
    return required_binary(INSTALLED, "opencode", FLAG, "scripts/install-opencode.sh")


def opencode_json(model: str, *, limit: tuple[int, int] | None = None) -> dict[str, object]:
    """The user's config: `model` (``provider/name``) for every agent, including the title
    one, every tool allowed (a headless run cannot ask), nothing fetched or shared; with
    `limit`, the model's (context, output) limits as OpenCode should believe them (it asks for
    the output limit, capped at 32,000, as `max_output_tokens` on every request)."""
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "model": model,
        "small_model": model,
        "autoupdate": False,
        "share": "disabled",
        "permission": {"*": "allow", "external_directory": "allow"},
    }
    if limit is not None:
        provider, name = model.split("/", 1)
        limits = {"context": limit[0], "output": limit[1]}
        config["provider"] = {provider: {"models": {name: {"limit": limits}}}}
    return config


class OpenCode:
    """One OpenCode setup under `root`: ``home`` (HOME, with the XDG directories inside it and
    ``opencode.json`` in its config directory), runs in ``workdir``."""

    def __init__(
        self,
        model: str,
        root: Path,
        *,
        binary: Path | None = None,
        api_key: str = "sk-opencode-test",
        limit: tuple[int, int] | None = None,
    ) -> None:
        found = binary or opencode_binary()
        if found is None:
            raise FileNotFoundError("opencode is not installed: run scripts/install-opencode.sh")
        self.binary = found
        self.model = model
        self.api_key = api_key
        self.home = root / "opencode-home"
        self.workdir = root / "work"
        self.config_dir = self.home / ".config" / "opencode"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = opencode_json(model, limit=limit)
        (self.config_dir / "opencode.json").write_text(json.dumps(config, indent=2))

    def env(self, base_url: str | None = None) -> dict[str, str]:
        """The environment of a run: scratch HOME and XDG directories, both providers' keys;
        with `base_url` (…/v1), the openai and anthropic providers sent there."""
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "TERM")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            {
                "HOME": str(self.home),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_DATA_HOME": str(self.home / ".local" / "share"),
                "XDG_CACHE_HOME": str(self.home / ".cache"),
                "XDG_STATE_HOME": str(self.home / ".local" / "state"),
                "OPENAI_API_KEY": self.api_key,
                "ANTHROPIC_API_KEY": self.api_key,
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                "OPENCODE_DISABLE_SHARE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                "NO_COLOR": "1",
                "CI": "1",
                "NO_PROXY": "127.0.0.1,localhost",
            }
        )
        if base_url is not None:
            options = {"options": {"baseURL": base_url}}
            content = {"provider": {"openai": options, "anthropic": options}}
            env["OPENCODE_CONFIG_CONTENT"] = json.dumps(content)
        return env

    def command(self, task: str) -> list[str]:
        """``opencode run`` with the task, headless (no TUI, no server), with the model."""
        return [str(self.binary), "run", "-m", self.model, task]

    def run(self, task: str, base_url: str, timeout: float = 300.0) -> AgentRun:
        """Run the task against `base_url`; a timeout kills it and reports exit code -9."""
        done = run_headless(
            self.command(task), self.workdir, self.env(base_url), timeout, "opencode"
        )
        code = -9 if done.exit_code is None else done.exit_code
        return AgentRun(code, done.stdout, done.stderr, done.seconds, self.workdir)
