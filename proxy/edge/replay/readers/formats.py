"""Which reader a path needs, told from what the files hold (not their names alone)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from proxy.edge.replay.readers import claude_code, codex, gemini_cli, opencode, plain
from proxy.edge.replay.readers.jsonl import json_file, json_lines
from proxy.edge.replay.readers.recording import Recording, RecordingError

Reader = Callable[[Path], list[Recording]]
_PEEK_LINES = 20


def read_paths(paths: Iterable[str]) -> list[Recording]:
    """Every session the paths hold, in order; a folder is searched for sessions."""
    recordings: list[Recording] = []
    for given in paths:
        path = Path(given).expanduser()
        if not path.exists():
            raise RecordingError(f"{given}: no such file or folder")
        recordings.extend(_read(path))
    return recordings


def _read(path: Path) -> list[Recording]:
    if opencode.storage_root(path) is not None:
        return opencode.read(path)
    if path.is_file():
        return reader_for(path)(path)
    found: list[Recording] = []
    stores = sorted({p.parent for p in path.rglob("message") if opencode.storage_root(p.parent)})
    for store in stores:
        found.extend(opencode.read(store))
    for file in sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl", ".db")):
        if any(store in file.parents for store in stores):
            continue
        try:
            reader = reader_for(file)
        except RecordingError:
            continue  # a folder of sessions holds other files too
        found.extend(reader(file))
    if not found:
        raise RecordingError(f"{path}: no saved agent session found in this folder")
    return found


def _header(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            return file.read(16)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from exc


def reader_for(path: Path) -> Reader:
    """The reader of a session file; RecordingError when it is none of the known formats."""
    if path.suffix == ".db" and _header(path) == b"SQLite format 3\x00":
        return opencode.read_database
    if path.suffix == ".jsonl":
        lines = json_lines(path)[:_PEEK_LINES]
        if any(codex.looks_like(line) for line in lines):
            return codex.read
        if gemini_cli.looks_like_lines(lines):
            return gemini_cli.read
        if any(claude_code.looks_like(line) for line in lines):
            return claude_code.read
        if lines and all(plain.api_of(line) for line in lines):
            return plain.read
    elif path.suffix == ".json":
        value = json_file(path)
        if gemini_cli.looks_like(value):
            return gemini_cli.read
        if plain.api_of(value) or (isinstance(value, list) and value and plain.api_of(value[0])):
            return plain.read
    raise RecordingError(
        f"{path}: not a saved session of Claude Code, Codex, Gemini CLI or OpenCode, nor a "
        "Chat Completions or Responses body"
    )
