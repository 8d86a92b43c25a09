"""`ctxgate run`'s help names the agents it knows with their install commands, and a missing
agent's error says how to install it (with the shell's exit code 127)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.edge.run.agents import AGENTS, not_found

ROOT = Path(__file__).parents[3]
# The repository's own install script for each agent (the tests' copies under .agents/).
SCRIPTS = {
    "claude": "install-claude-code.sh",
    "codex": "install-codex.sh",
    "aider": "install-aider.sh",
    "opencode": "install-opencode.sh",
    "gemini": "install-gemini-cli.sh",
}


def cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "proxy.edge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_run_help_lists_every_known_agent_with_its_install_command() -> None:
    done = cli("run", "--help")
    assert done.returncode == 0
    listed = done.stdout.split("agents it knows", 1)[1]
    for name, spec in AGENTS.items():
        line = next(line for line in listed.splitlines() if line.split()[:1] == [name])
        assert line.rstrip().endswith(spec.install), line


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_each_install_command_installs_the_package_the_repositorys_script_does(name: str) -> None:
    install = AGENTS[name].install
    assert install.startswith(("npm install -g ", "pipx install "))
    package = install.split()[-1]
    assert package in (ROOT / "scripts" / SCRIPTS[name]).read_text()


def test_a_missing_agent_is_told_how_to_install_it(tmp_path: Path) -> None:
    done = cli("run", "gemini", "-p", "hi", path=str(tmp_path))  # an empty PATH directory
    assert done.returncode == 127
    assert done.stderr == (
        "ctxgate: gemini: command not found; install Gemini CLI with: "
        "npm install -g @google/gemini-cli\n"
    )


def test_an_unknown_missing_command_gets_the_shells_message_only() -> None:
    assert not_found("frobnicate") == "frobnicate: command not found"
    assert not_found("/opt/bin/claude").endswith("npm install -g @anthropic-ai/claude-code")
