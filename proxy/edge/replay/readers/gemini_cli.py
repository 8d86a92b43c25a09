"""Gemini CLI's saved sessions as Gemini API requests: its chat recordings
(`~/.gemini/tmp/PROJECT/chats/session-*.json`, or `.jsonl` from version 0.5x on) and its
`/chat save` checkpoints (`checkpoint-TAG.json`, the conversation's `contents` as sent).

A `.jsonl` recording is a log of changes to that record: a first line with the session's
fields, then messages (a message logged again under its id replaces the earlier one) and
`{"$set": {...}}` lines (a `messages` list set this way replaces the list so far).

A chat recording is `{"sessionId", "messages": [...]}`: a `user` message's `content` is text or
parts; a `gemini` message has its text and `toolCalls`, each with the `functionResponse` parts
of its `result`, which the CLI sent back as the next user turn. `info` and `error` messages
are the CLI's own and never reached the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.edge.replay.readers.jsonl import json_file, json_lines
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "gemini-cli"
DEFAULT_MODEL = "gemini-2.5-pro"  # the CLI's default; a checkpoint does not name its model


def looks_like(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(isinstance(c, dict) and "parts" in c for c in value)
    return (
        isinstance(value, dict)
        and isinstance(value.get("messages"), list)
        and ("sessionId" in value or "projectHash" in value)
    )


def looks_like_lines(lines: list[dict[str, Any]]) -> bool:
    return bool(lines) and "sessionId" in lines[0] and "projectHash" in lines[0]


def read(path: Path) -> list[Recording]:
    value = _folded(json_lines(path)) if path.suffix == ".jsonl" else json_file(path)
    if isinstance(value, list):
        contents, model, name = [dict(c) for c in value], DEFAULT_MODEL, path.stem
    elif looks_like(value):
        contents, model = _contents(value["messages"])
        name = str(value.get("sessionId") or path.stem)
    else:
        raise RecordingError(f"{path}: not a Gemini CLI chat or checkpoint")
    base: Body = {"contents": []}
    bodies = growing(base, "contents", contents, lambda c: c.get("role") == "model")
    return [Recording(name, SOURCE, "gemini", model, bodies)] if bodies else []


def _folded(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The record a `.jsonl` recording's changes add up to."""
    record: dict[str, Any] = dict(lines[0]) if lines else {}
    messages: dict[str, Any] = {}
    for n, line in enumerate(lines[1:]):
        changes = line.get("$set")
        if isinstance(changes, dict):
            if isinstance(changes.get("messages"), list):
                messages = {
                    str(m.get("id", f"set-{n}-{i}")): m
                    for i, m in enumerate(changes["messages"])
                    if isinstance(m, dict)
                }
        elif "type" in line:
            messages[str(line.get("id", f"line-{n}"))] = line
    record["messages"] = list(messages.values())
    return record


def _contents(messages: list[Any]) -> tuple[list[Body], str]:
    contents: list[Body] = []
    model = ""
    answered: set[str] = set()  # calls whose responses were sent with their call's result
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("type") == "user":
            parts = [_sent_response(p) for p in _parts(message.get("content"))]
            parts = [p for p in parts if _response_id(p) not in answered]
            _add(contents, "user", parts)
        elif message.get("type") == "gemini":
            model = model or str(message.get("model") or "")
            calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
            parts = _parts(message.get("content"))
            parts += [{"functionCall": _call(c)} for c in calls]
            _add(contents, "model", parts)
            responses = [p for c in calls for p in _responses(c)]
            answered.update(i for i in map(_response_id, responses) if i is not None)
            _add(contents, "user", responses)
    return contents, model or DEFAULT_MODEL


def _add(contents: list[Body], role: str, parts: list[Body]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _parts(content: Any) -> list[Body]:
    if isinstance(content, str):
        return [{"text": content}] if content.strip() else []
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return []
    parts = []
    for part in content:
        if isinstance(part, str) and part.strip():
            parts.append({"text": part})
        elif isinstance(part, dict) and not (set(part) == {"text"} and not part["text"]):
            parts.append(dict(part))
    return parts


def _response_id(part: Body) -> str | None:
    response = part.get("functionResponse")
    found = response.get("id") if isinstance(response, dict) else None
    return str(found) if found else None


def _wire_id(value: Any, name: Any) -> Any:
    """A call's id as sent: the CLI records it prefixed with the tool's name and `__`."""
    prefix = f"{name}__"
    if isinstance(value, str) and value.startswith(prefix):
        return value[len(prefix) :]
    return value


def _call(call: dict[str, Any]) -> Body:
    out: Body = {"name": call.get("name", ""), "args": call.get("args") or {}}
    if call.get("id"):
        out["id"] = _wire_id(call["id"], call.get("name"))
    return out


def _sent_response(part: Body) -> Body:
    response = part.get("functionResponse")
    if not isinstance(response, dict) or "id" not in response:
        return part
    wire = {**response, "id": _wire_id(response["id"], response.get("name"))}
    return {**part, "functionResponse": wire}


def _responses(call: dict[str, Any]) -> list[Body]:
    """The parts the CLI sent back for a call: the `functionResponse` parts of its result,
    else one made of what the terminal showed."""
    result = call.get("result")
    found = [
        _sent_response(part)
        for part in (result if isinstance(result, list) else [])
        if isinstance(part, dict) and "functionResponse" in part
    ]
    if found:
        return found
    shown = call.get("resultDisplay")
    response: Body = {"name": call.get("name", ""), "response": {"output": str(shown or "")}}
    if call.get("id"):
        response["id"] = _wire_id(call["id"], call.get("name"))
    return [{"functionResponse": response}]
