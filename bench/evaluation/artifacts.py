"""Artifacts an agent needs later (file paths, commands, error names, exit codes, record ids),
extracted from the full history by regex, and their presence in a forwarded view.

Factory's probe study found the artifact trail to be the weakest dimension of every
summarizer, so this is measured separately from needles and user messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

Message = dict[str, Any]

_CODE_EXT = r"(?:py|pyi|js|ts|json|ya?ml|toml|cfg|ini|txt|md|rst|c|h|cpp|go|rs|java|sh|html|sol)"
PATTERNS: dict[str, re.Pattern[str]] = {
    # a path with at least one directory, or a bare file name with a source-code extension
    "path": re.compile(
        rf"(?<![\w./-])(?:\.{{0,2}}/)?(?:[\w-][\w.-]*/)+[\w-][\w.-]*\.{_CODE_EXT}\b"
        rf"|(?<![\w./-])[\w-]+\.{_CODE_EXT}\b"
    ),
    "error": re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b"),
    "exit": re.compile(r"<returncode>-?\d+</returncode>|\bexit (?:code|status):? ?-?\d+", re.I),
    # tau-bench records: user ids, reservation ids, flight numbers, payment methods
    "id": re.compile(
        r"\b[a-z]+_[a-z]+_\d{3,5}\b|\b(?=[A-Z0-9]{6}\b)(?=\w*\d)(?=\w*[A-Z])[A-Z0-9]{6}\b"
        r"|\bHAT\d{3}\b|\b(?:credit_card|gift_card|certificate)_\d{5,8}\b"
    ),
}
_FENCED = re.compile(r"```[\w-]*\n(.+?)\n```", re.S)
KINDS = (*PATTERNS, "command")


def _string_leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _string_leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _string_leaves(item)


def _arguments(call: dict[str, Any]) -> tuple[str, Any]:
    raw = (call.get("function") or {}).get("arguments") or ""
    try:
        return raw, json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw, None


def message_text(message: Message) -> str:
    """Everything a model would read in one message: content, tool names, raw and parsed args."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    for call in message.get("tool_calls") or []:
        raw, parsed = _arguments(call)
        parts.append(str((call.get("function") or {}).get("name") or ""))
        parts.append(raw if isinstance(raw, str) else json.dumps(raw))
        parts.extend(_string_leaves(parsed))
    return "\n".join(parts)


def view_text(messages: Sequence[Message]) -> str:
    return "\n".join(message_text(m) for m in messages)


def _commands(message: Message) -> Iterable[str]:
    for call in message.get("tool_calls") or []:
        _raw, parsed = _arguments(call)
        if isinstance(parsed, dict):
            for key in ("command", "cmd"):
                if isinstance(parsed.get(key), str) and parsed[key].strip():
                    yield parsed[key].strip()
    content = message.get("content")
    if message.get("role") == "assistant" and isinstance(content, str):
        # text-action agents (SWE-agent, mini-swe-agent): the action is the fenced block
        for block in _FENCED.findall(content):
            first = block.strip().splitlines()[0].strip() if block.strip() else ""
            if first:
                yield first


def extract(messages: Sequence[Message]) -> dict[str, set[str]]:
    """Distinct artifacts by kind found anywhere in `messages`."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for message in messages:
        text = message_text(message)
        for kind, pattern in PATTERNS.items():
            found[kind].update(pattern.findall(text))
        found["command"].update(_commands(message))
    return found


def retained(artifacts: dict[str, set[str]], text: str) -> dict[str, tuple[int, int]]:
    """(present, total) per kind: an artifact is present when it occurs verbatim in `text`."""
    return {
        kind: (sum(1 for a in items if a in text), len(items)) for kind, items in artifacts.items()
    }
