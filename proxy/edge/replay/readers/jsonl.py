"""Reading JSON files and JSON-lines files whose lines may be broken (pure but for the read).

An agent appends to its session log as it runs: a log copied mid-write ends in a partial
line, which is skipped rather than failing the whole session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from proxy.edge.replay.readers.recording import RecordingError


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file; lines that are not a JSON object are skipped."""
    objects = []
    for line in _read(path).splitlines():
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


def json_file(path: Path) -> Any:
    try:
        return orjson.loads(_read(path))
    except orjson.JSONDecodeError as exc:
        raise RecordingError(f"{path}: not JSON ({exc})") from exc


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from exc
