"""Codex's session rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) as Responses
requests.

A line is `{"type", "payload"}`: `session_meta` (the session's id and instructions),
`turn_context` (the model), `response_item` (an item of the Responses input: a message, a
function call or its output, a reasoning item, …) and `event_msg`, `world_state` and
`token_usage_record` (Codex's own bookkeeping; not sent to the model). Codex sends its base
instructions as the first input item (a developer message) where `session_meta` holds
`base_instructions`, and as the body's `instructions` where it holds `instructions`; each item
is sent without the metadata Codex keeps beside it. Rollouts written before the wrapper existed
hold the items as lines of their own, after a first line with the session's id and
instructions; all of these are read. The tool schemas are not in a rollout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.edge.replay.readers.jsonl import json_lines
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "codex"
DEFAULT_MODEL = "gpt-5-codex"  # Codex's default when a rollout names none
ITEMS = {
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "reasoning",
    "web_search_call",
}
METADATA = "internal_chat_message_metadata_passthrough"  # Codex's own, never sent
ANSWERS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call"}


def looks_like(line: dict[str, Any]) -> bool:
    if "payload" in line:
        return line.get("type") in ("session_meta", "response_item", "turn_context", "event_msg")
    return "instructions" in line and "id" in line and "timestamp" in line


def read(path: Path) -> list[Recording]:
    items: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    model = ""
    for line in json_lines(path):
        kind, payload = line.get("type"), line.get("payload")
        if isinstance(payload, dict):
            if kind == "session_meta":
                meta = payload
            elif kind == "turn_context" and payload.get("model"):
                model = str(payload["model"])
            elif kind == "response_item" and payload.get("type") in ITEMS:
                items.append(_sent(payload))
        elif kind in ITEMS:
            items.append(_sent({k: v for k, v in line.items() if k != "timestamp"}))
        elif "instructions" in line and not meta:
            meta = line
    if not items:
        raise RecordingError(f"{path}: no response item in this Codex rollout")
    model = model or str(meta.get("model") or DEFAULT_MODEL)
    base: Body = {"model": model, "stream": False, "store": False}
    if meta.get("instructions"):
        base["instructions"] = meta["instructions"]
    first = _base_instructions(meta.get("base_instructions"))
    items = [first, *items] if first is not None else items
    bodies = growing(base, "input", items, _is_answer)
    name = str(meta.get("id") or path.stem)
    return [Recording(name, SOURCE, "responses", model, bodies)] if bodies else []


def _sent(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != METADATA}


def _base_instructions(value: Any) -> dict[str, Any] | None:
    text = value.get("text") if isinstance(value, dict) else value
    if not isinstance(text, str) or not text.strip():
        return None
    return {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": text}],
    }


def _is_answer(item: dict[str, Any]) -> bool:
    if item.get("type") == "message":
        return item.get("role") == "assistant"
    return item.get("type") in ANSWERS
