"""Plain request bodies: a Chat Completions or Responses body (its history holds every
earlier request), a JSON list of bodies, or JSON lines of bodies (requests as recorded, sent
in order)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.edge.replay.readers.jsonl import json_file, json_lines
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "plain"


def api_of(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list) and "model" in body:
        return "messages" if "max_tokens" in body and "system" in body else "chat"
    if "input" in body and "model" in body:
        return "responses"
    return None


def read(path: Path) -> list[Recording]:
    value: Any = json_lines(path) if path.suffix == ".jsonl" else json_file(path)
    if isinstance(value, dict):
        return [_history(path, value)]
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return [_history(path, value[0])]
    if isinstance(value, list) and value:
        apis = {api_of(body) for body in value}
        if len(apis) != 1 or None in apis:
            raise RecordingError(f"{path}: not a list of Chat Completions or Responses bodies")
        api = apis.pop()
        assert api is not None
        bodies = tuple({**body, "stream": False} for body in value)
        return [Recording(path.stem, SOURCE, api, str(value[-1]["model"]), bodies)]
    raise RecordingError(f"{path}: no request body")


def _history(path: Path, body: Body) -> Recording:
    """The requests one body's history implies: one before each assistant answer in it, then
    the body itself."""
    api = api_of(body)
    if api is None:
        raise RecordingError(f"{path}: not a Chat Completions or Responses request body")
    key = "input" if api == "responses" else "messages"
    items = body[key] if isinstance(body[key], list) else [body[key]]
    base = {**body, "stream": False}
    earlier = growing(base, key, items, _is_answer)
    return Recording(path.stem, SOURCE, api, str(body["model"]), (*earlier, {**base, key: items}))


def _is_answer(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if item.get("type") in ("function_call", "reasoning", "custom_tool_call"):
        return True
    return item.get("role") == "assistant"
