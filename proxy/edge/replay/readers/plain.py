"""Plain request bodies: a Chat Completions, Responses or Messages body (its history holds
every earlier request), a JSON list of bodies, or JSON lines of bodies (requests as recorded,
sent in order). A recorded request `{"path", "headers", "body"}` counts as its body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.edge.replay.readers.jsonl import json_file, json_lines
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "plain"


def unwrapped(value: Any) -> Any:
    """The body of a recorded request `{"path", "body", …}`; any other value as it is."""
    if isinstance(value, dict) and isinstance(value.get("body"), dict) and "path" in value:
        return value["body"]
    if isinstance(value, list):
        return [unwrapped(item) for item in value]
    return value


def api_of(body: Any) -> str | None:
    body = unwrapped(body)
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list) and "model" in body:
        return "messages" if "max_tokens" in body and "system" in body else "chat"
    if "input" in body and "model" in body:
        return "responses"
    return None


def read(path: Path) -> list[Recording]:
    value: Any = unwrapped(json_lines(path) if path.suffix == ".jsonl" else json_file(path))
    if isinstance(value, dict):
        return [_history(path, value)]
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return [_history(path, value[0])]
    if isinstance(value, list) and value:
        apis = {api_of(body) for body in value}
        if len(apis) != 1 or None in apis:
            raise RecordingError(f"{path}: not a list of request bodies of one API")
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
        raise RecordingError(f"{path}: not a Chat Completions, Responses or Messages body")
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
