"""Finding a real agent's binary for a test: the one its install script put under `.agents/`,
else one on PATH; a test skips without it, unless CI installed it (then it fails)."""

from __future__ import annotations

import os
import shutil
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
