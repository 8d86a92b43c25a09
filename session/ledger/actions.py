"""The next action an answer takes, in each wire API, and whether two answers agree (pure).

An answer's action is its first tool call (name and arguments, the arguments parsed and
written back with sorted keys and trimmed strings), else its text (lower-cased, whitespace
collapsed). Two tool calls agree when name and arguments are equal; when either answer was cut
by its token limit, the arguments may be cut too and the names alone decide. Two texts agree
when the shorter is a prefix of the longer, over the first `TEXT_PREFIX` characters: shadow
calls are bounded, the client's answer may not be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

TEXT_PREFIX = 200
_SPACE = re.compile(r"\s+")
_CUT = {"length", "max_tokens", "max_output_tokens", "incomplete"}


@dataclass(frozen=True, slots=True)
class Action:
    kind: Literal["tool", "text"]
    name: str  # the tool's name; "" for text
    detail: str  # normalised arguments, or the normalised text prefix
    cut: bool = False  # the answer stopped at its token limit


def agree(a: Action, b: Action) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "tool":
        return a.name == b.name and (a.detail == b.detail or a.cut or b.cut)
    n = min(len(a.detail), len(b.detail))
    return a.detail[:n] == b.detail[:n] and (n > 0 or a.detail == b.detail)


def next_action(api: str, answer: bytes) -> Action | None:
    """The answer's action; None when it is not an answer in `api`'s shape."""
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    if api == "chat":
        return _chat(data)
    if api == "responses":
        return _responses(data)
    if api == "messages":
        return _messages(data)
    return None


def normalised_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON (sorted keys, strings trimmed); unparsable text as is."""
    if isinstance(arguments, str):
        text: str = arguments
        try:
            arguments = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text.strip()
    return orjson.dumps(_trimmed(arguments), option=orjson.OPT_SORT_KEYS).decode()


def normalised_text(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()[:TEXT_PREFIX]


def _trimmed(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [_trimmed(v) for v in value]
    if isinstance(value, dict):
        return {k: _trimmed(v) for k, v in value.items()}
    return value


def _tool(name: Any, arguments: Any, cut: bool) -> Action:
    return Action("tool", str(name), normalised_arguments(arguments), cut)


def _text(parts: list[str], cut: bool) -> Action:
    return Action("text", "", normalised_text("".join(parts)), cut)


def _chat(data: dict[str, Any]) -> Action | None:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None
    cut = choice.get("finish_reason") in _CUT
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            return _tool(function.get("name"), function.get("arguments") or "{}", cut)
    content = message.get("content")
    return _text([content] if isinstance(content, str) else [], cut)


def _responses(data: dict[str, Any]) -> Action | None:
    output = data.get("output")
    if not isinstance(output, list):
        return None
    cut = data.get("status") == "incomplete"
    texts: list[str] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            return _tool(item.get("name"), item.get("arguments") or "{}", cut)
        if kind == "custom_tool_call":
            return _tool(item.get("name"), item.get("input") or "", cut)
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return _text(texts, cut)


def _messages(data: dict[str, Any]) -> Action | None:
    content = data.get("content")
    if not isinstance(content, list):
        return None
    cut = data.get("stop_reason") in _CUT
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            return _tool(block.get("name"), block.get("input") or {}, cut)
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return _text(texts, cut)
