"""aider as a real client in tests: ``aider --message "task" file…`` headless against a base URL
(the provider simulator, or ctxgate in front of it) as an OpenAI-compatible model, in a scratch
work directory with a throw-away HOME.

    agent = Aider(base_url, "sim-8k", tmp_path, window=8192)
    (agent.workdir / "app.py").write_text(source)
    run = agent.run("Explain app.py", ["app.py"])
    run.exit_code, run.stdout, run.stderr, run.seconds

Each run is one aider process; ``restore=True`` reloads the conversation so far from the work
directory's ``.aider.chat.history.md`` and resends it, so successive runs make one conversation.

Nothing is fetched at run time: the model's window comes from a model metadata file (aider
would otherwise download litellm's price list), litellm uses its bundled copy, update checks,
analytics, release notes and URL detection are off, and the proxy variables point at a closed
port so that any other outbound request fails at once (and shows in the output) instead of
waiting on the network. ``BROWSER=true``: ``--yes-always`` also accepts aider's offers to open
a help page, which must not start a browser.

Install the binary with ``scripts/install-aider.sh`` (it lands in ``.agents/aider``, a venv of
its own).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.agents.binaries import Finished, agent_binary, required_binary, run_headless

REPO = Path(__file__).resolve().parents[2]
INSTALLED = REPO / ".agents" / "aider" / "bin" / "aider"
CLOSED_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, a connect fails at once
NO_LIMIT = 1_000_000


def aider_binary() -> Path | None:
    """aider installed by scripts/install-aider.sh, else one on PATH."""
    return agent_binary(INSTALLED, "aider")


def required_aider() -> Path:
    """The aider binary for a test (skipped, or failed under CTXGATE_TEST_AIDER=1, without it)."""
    return required_binary(INSTALLED, "aider", "CTXGATE_TEST_AIDER", "scripts/install-aider.sh")


AiderRun = Finished  # what one headless aider run gave


def model_metadata(model: str, window: int) -> dict[str, dict[str, object]]:
    """litellm's model-info entry for ``openai/<model>``: its window, free of charge."""
    return {
        f"openai/{model}": {
            "max_input_tokens": window,
            "max_tokens": window,
            "max_output_tokens": window // 2,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


class Aider:
    """One aider setup under ``root``: ``home`` (HOME), ``workdir`` (where it runs and keeps its
    chat history) and the model metadata file giving aider the window."""

    def __init__(
        self,
        base_url: str,
        model: str,
        root: Path,
        *,
        window: int,
        binary: Path | None = None,
        api_key: str = "sk-aider-test",
        edit_format: str = "diff",
    ) -> None:
        found = binary or aider_binary()
        if found is None:
            raise FileNotFoundError("aider is not installed: run scripts/install-aider.sh")
        self.binary = found
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self.edit_format = edit_format
        self.home = root / "aider-home"
        self.workdir = root / "work"
        self.metadata = root / "model-metadata.json"
        self.home.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.metadata.write_text(json.dumps(model_metadata(model, window)))

    def env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            {
                "HOME": str(self.home),
                "TERM": "dumb",
                "NO_COLOR": "1",
                "BROWSER": "true",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "HTTP_PROXY": CLOSED_PROXY,
                "HTTPS_PROXY": CLOSED_PROXY,
                "http_proxy": CLOSED_PROXY,
                "https_proxy": CLOSED_PROXY,
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        return env

    def command(
        self, message: str, files: list[str], *, restore: bool, history_tokens: int
    ) -> list[str]:
        return [
            str(self.binary),
            "--model",
            f"openai/{self.model}",
            "--openai-api-base",
            self.base_url,
            "--openai-api-key",
            self.api_key,
            "--model-metadata-file",
            str(self.metadata),
            "--edit-format",
            self.edit_format,
            # aider summarizes its own history past this many tokens (by default 1/16 of the
            # window); a test of ctxgate's compression sets it out of reach
            "--max-chat-history-tokens",
            str(history_tokens),
            "--restore-chat-history" if restore else "--no-restore-chat-history",
            "--message",
            message,
            "--yes-always",
            "--no-git",
            "--no-auto-commits",
            "--no-auto-lint",
            "--map-tokens",
            "0",
            "--no-check-update",
            "--no-analytics",
            "--no-show-release-notes",
            "--no-show-model-warnings",
            "--no-detect-urls",
            "--no-pretty",
            "--no-fancy-input",
            "--timeout",
            "60",
            *files,
        ]

    def run(
        self,
        message: str,
        files: list[str],
        *,
        restore: bool = True,
        history_tokens: int = NO_LIMIT,
        timeout: float = 120.0,
    ) -> AiderRun:
        """One aider process answering ``message`` with ``files`` (relative to ``workdir``)
        added to the chat; a timeout kills it and reports ``exit_code`` None."""
        command = self.command(message, files, restore=restore, history_tokens=history_tokens)
        return run_headless(command, self.workdir, self.env(), timeout, "aider")
