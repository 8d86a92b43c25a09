"""OpenCode's sessions as Chat Completions requests: its SQLite database
(`~/.local/share/opencode/opencode.db`, from version 1.x) or its older JSON storage
(`~/.local/share/opencode/storage/`).

The database's `message` and `part` tables hold, as JSON in `data`, what the storage's
`message/SESSION/MSG.json` and `part/MSG/PART.json` files hold: a message's `role`,
`time.created` and an answer's `modelID`; its parts: `text`, `reasoning`, `tool` (`callID`,
`tool`, `state.input`, `state.output`), `step-start` and `step-finish`. One assistant message
holds every step of a turn, and each step was a model call: its text and tool calls are one
answer, its tools' outputs the next request's new messages.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson

from proxy.edge.replay.readers.jsonl import json_file
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "opencode"
DEFAULT_MODEL = "gpt-4.1"


def storage_root(path: Path) -> Path | None:
    """The storage folder `path` is, or is inside of (a session file, a session folder)."""
    for candidate in (path, *path.parents):
        if (candidate / "message").is_dir() and (candidate / "part").is_dir():
            return candidate
    return None


def read(path: Path) -> list[Recording]:
    root = storage_root(path)
    if root is None:
        raise RecordingError(f"{path}: not an OpenCode storage folder (no message/ and part/)")
    if path.is_file():
        ids = [path.stem]
    else:
        ids = sorted(p.name for p in (root / "message").iterdir() if p.is_dir())
    recordings = [_session(root, sid) for sid in ids]
    return [r for r in recordings if r is not None]


def read_database(path: Path) -> list[Recording]:
    """Every session of an OpenCode database, read without writing to it."""
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            ids = [row[0] for row in db.execute("SELECT id FROM session ORDER BY time_created")]
            recordings = [_from_database(db, sid) for sid in ids]
    except sqlite3.Error as exc:
        raise RecordingError(f"{path}: not an OpenCode database ({exc})") from exc
    return [r for r in recordings if r is not None]


def _from_database(db: sqlite3.Connection, session_id: str) -> Recording | None:
    rows = db.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
        (session_id,),
    ).fetchall()
    records = [{**_loads(data), "id": mid} for mid, data in rows]

    def parts(message_id: str) -> list[dict[str, Any]]:
        found = db.execute("SELECT data FROM part WHERE message_id = ? ORDER BY id", (message_id,))
        return [_loads(data) for (data,) in found]

    return _conversation(session_id, records, parts)


def _loads(data: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _session(root: Path, session_id: str) -> Recording | None:
    records = [json_file(p) for p in sorted((root / "message" / session_id).glob("*.json"))]
    records = [r for r in records if isinstance(r, dict)]
    records.sort(key=lambda r: (_created(r), str(r.get("id", ""))))
    return _conversation(session_id, records, lambda mid: _parts(root, mid))


def _conversation(
    session_id: str,
    records: list[dict[str, Any]],
    parts_of: Callable[[str], list[dict[str, Any]]],
) -> Recording | None:
    messages: list[Body] = []
    model = ""
    for record in records:
        parts = parts_of(str(record.get("id", "")))
        if record.get("role") == "user":
            text = "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
            if text.strip():
                messages.append({"role": "user", "content": text})
        elif record.get("role") == "assistant":
            model = model or str(record.get("modelID") or "")
            for step in _steps(parts):
                messages.extend(_answer(step))
    model = model or DEFAULT_MODEL
    bodies = growing({"model": model}, "messages", messages, lambda m: m["role"] == "assistant")
    return Recording(session_id, SOURCE, "chat", model, bodies) if bodies else None


def _created(record: dict[str, Any]) -> float:
    time = record.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    return float(created) if isinstance(created, (int, float)) else 0.0


def _parts(root: Path, message_id: str) -> list[dict[str, Any]]:
    found = [json_file(p) for p in sorted((root / "part" / message_id).glob("*.json"))]
    return [p for p in found if isinstance(p, dict)]


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    return [s for s in steps if s]


def _answer(step: list[dict[str, Any]]) -> list[Body]:
    """One step: the assistant's message, then one tool message per call it made."""
    text = "\n".join(str(p.get("text", "")) for p in step if p.get("type") == "text").strip()
    tools = [p for p in step if p.get("type") == "tool" and p.get("callID")]
    if not text and not tools:
        return []
    answer: Body = {"role": "assistant", "content": text or None}
    if tools:
        answer["tool_calls"] = [
            {
                "id": str(p["callID"]),
                "type": "function",
                "function": {"name": str(p.get("tool", "")), "arguments": _arguments(p)},
            }
            for p in tools
        ]
    return [
        answer,
        *({"role": "tool", "tool_call_id": str(p["callID"]), "content": _output(p)} for p in tools),
    ]


def _state(part: dict[str, Any]) -> dict[str, Any]:
    state = part.get("state")
    return state if isinstance(state, dict) else {}


def _arguments(part: dict[str, Any]) -> str:
    return orjson.dumps(_state(part).get("input") or {}).decode()


def _output(part: dict[str, Any]) -> str:
    state = _state(part)
    value = state.get("output") if state.get("output") is not None else state.get("error")
    return value if isinstance(value, str) else orjson.dumps(value).decode()
