"""Real agents for tests: finding a binary (the one its install script put under `.agents/`,
else one on PATH; a test skips without it, unless CI installed it, then it fails) and running
it headless with a timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


def agent_binary(installed: Path, name: str) -> Path | None:
    """`installed` when its install script ran, else `name` on PATH."""
    if installed.exists():
        return installed
    found = shutil.which(name)
    return Path(found) if found else None


def required_binary(installed: Path, name: str, flag: str, script: str) -> Path:
    """The binary for a test: skipped when it is not installed, failed when CI installed it
    (`flag`=1) and it is missing all the same."""
    found = agent_binary(installed, name)
    if found is None:
        if os.environ.get(flag) == "1":
            pytest.fail(f"{flag}=1 but {name} is not installed ({script})")
        pytest.skip(f"{name} is not installed: run {script}")
    return found


@dataclass(frozen=True, slots=True)
class Finished:
    exit_code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass(frozen=True)
class AgentRun:
    """One headless run of a real agent, and the directory it worked in."""

    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path


def run_headless(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float, name: str
) -> Finished:
    """Run an agent to its end with no terminal; at `timeout` it is killed, and said so."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        killed = _text(exc.stderr) + f"\n[{name} killed after {timeout:.0f} s]"
        return Finished(None, _text(exc.stdout), killed, timeout)
    return Finished(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""
