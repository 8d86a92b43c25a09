"""Responses API input items as the simulator reads them: their token count, their chat-shaped
view (for the default responder and the summary detector), the pairing rules of calls and their
outputs, and the seal that makes reasoning ``encrypted_content`` verifiable.

A reasoning item's ``encrypted_content`` is base64 of its JSON payload (item id, summary text,
reasoning text) and an HMAC of that payload with a per-simulator key: a changed byte, a payload
moved to another item, or content from another simulator fails the check, as OpenAI's does."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from .tokens import IMAGE_TOKENS, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, count_text

CALL_TYPES = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
}
OUTPUT_TYPES = {output: call for call, output in CALL_TYPES.items()}
_OUTPUT_NOUN = {
    "function_call_output": "function call output",
    "custom_tool_call_output": "custom tool call output",
    "local_shell_call_output": "local shell call output",
}
_CALL_NOUN = {
    "function_call": "function call",
    "custom_tool_call": "custom tool call",
    "local_shell_call": "local shell call",
}
OPAQUE_TOKENS_PER_CHAR = 0.25  # a compaction item this simulator did not seal: a rough figure
SEALED_TYPES = ("reasoning", "compaction")


def item_type(item: Any) -> str:
    """An input item's type; a bare ``{"role", "content"}`` is a message."""
    if not isinstance(item, dict):
        return "invalid"
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else "invalid"


def input_items(body: Any) -> list[Any]:
    """The request's ``input`` as a list of items (a string input is one user message)."""
    raw = body.get("input") if isinstance(body, dict) else None
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return list(raw) if isinstance(raw, list) else []


def parts_text(content: Any) -> str:
    """The text of a content value: a string, or text-bearing parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def _parts_tokens(content: Any) -> int:
    if isinstance(content, str):
        return count_text(content)
    if not isinstance(content, list):
        return 0
    total = 0
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("input_image", "input_file", "image_url"):
            total += IMAGE_TOKENS
        elif isinstance(part.get("text"), str):
            total += count_text(part["text"])
        elif isinstance(part.get("refusal"), str):
            total += count_text(part["refusal"])
    return total


def summary_text(item: dict[str, Any]) -> str:
    summary = item.get("summary")
    return parts_text(summary) if isinstance(summary, list) else ""


def item_tokens(item: Any, seal: Seal | None = None) -> int:
    """Tokens of one input item (3 per item, like a chat message, plus its text)."""
    kind = item_type(item)
    if kind == "invalid":
        return TOKENS_PER_MESSAGE + count_text(json.dumps(item))
    total = TOKENS_PER_MESSAGE
    if kind == "message":
        return total + count_text(str(item.get("role", ""))) + _parts_tokens(item.get("content"))
    if kind in ("function_call", "custom_tool_call"):
        value = item.get("arguments") if kind == "function_call" else item.get("input")
        return total + count_text(str(item.get("name", ""))) + count_text(str(value or ""))
    if kind in OUTPUT_TYPES:
        return total + _parts_tokens(item.get("output"))
    if kind == "reasoning":
        payload = seal.open(item) if seal is not None else None
        hidden = payload.get("text", "") if payload else ""
        return total + count_text(summary_text(item)) + count_text(str(hidden))
    if kind == "compaction":
        payload = seal.open(item) if seal is not None else None
        if payload is not None:
            return total + count_text(str(payload.get("text", "")))
        opaque = str(item.get("encrypted_content") or "")
        return total + int(len(opaque) * OPAQUE_TOKENS_PER_CHAR)
    visible = {k: v for k, v in item.items() if k not in ("id", "type", "status")}
    return total + count_text(json.dumps(visible, ensure_ascii=False))


def fixed_tokens(body: dict[str, Any]) -> int:
    """Tokens of what precedes the items: the tools' JSON and ``instructions``."""
    total = 0
    tools = body.get("tools")
    if tools:
        total += count_text(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        total += TOKENS_PER_MESSAGE + count_text("system") + count_text(instructions)
    return total


def prompt_units(body: dict[str, Any], items: list[Any], seal: Seal | None) -> list[int]:
    """Token counts of the prompt's units in order (the fixed part, then each item): their sum
    plus the reply priming is the prompt size, and their prefix is what a cache can reuse."""
    return [fixed_tokens(body)] + [item_tokens(item, seal) for item in items]


def count_input_tokens(
    body: dict[str, Any], items: list[Any], seal: Seal | None, factor: float = 1.0
) -> int:
    return int((sum(prompt_units(body, items, seal)) + REPLY_PRIMING_TOKENS) * factor)


def chat_view(body: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """The request as a chat body (``model`` and ``messages``), for responders written for chat:
    instructions become a system message, calls assistant tool calls, outputs tool messages."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item_type(item)
        if kind == "message":
            messages.append({"role": item.get("role"), "content": parts_text(item.get("content"))})
        elif kind in CALL_TYPES:
            args = item.get("arguments", item.get("input", item.get("action", "")))
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name", kind), "arguments": _as_text(args)},
            }
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in OUTPUT_TYPES:
            output = _as_text(item.get("output"))
            tool = {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
            messages.append(tool)
    return {"model": body.get("model"), "messages": messages, "tools": body.get("tools")}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return parts_text(value)
    return json.dumps(value, ensure_ascii=False)


def pairing_problems(items: list[Any]) -> list[tuple[int, str]]:
    """OpenAI's pairing rules for ``input``: every call output answers an earlier call of its
    kind, and every call has an output. Returns (item index, OpenAI's error text)."""
    problems: list[tuple[int, str]] = []
    calls: dict[str, tuple[int, str]] = {}
    answered: set[str] = set()
    for index, item in enumerate(items):
        kind = item_type(item)
        call_id = item.get("call_id") if isinstance(item, dict) else None
        if kind in CALL_TYPES and isinstance(call_id, str):
            calls[call_id] = (index, kind)
        elif kind in OUTPUT_TYPES:
            found = calls.get(call_id) if isinstance(call_id, str) else None
            if found is None or found[1] != OUTPUT_TYPES[kind]:
                noun = _OUTPUT_NOUN[kind]
                problems.append((index, f"No tool call found for {noun} with call_id {call_id}."))
            else:
                answered.add(str(call_id))
    for call_id, (index, kind) in calls.items():
        if call_id not in answered and kind != "local_shell_call":
            noun = _CALL_NOUN[kind]
            problems.append((index, f"No tool output found for {noun} {call_id}."))
    return sorted(problems)


class Seal:
    """Signs and verifies the simulator's reasoning ``encrypted_content``."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, payload: bytes) -> str:
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest()

    def close(self, item_id: str, summary: str, text: str) -> str:
        payload = json.dumps({"id": item_id, "summary": summary, "text": text}).encode()
        return base64.b64encode(payload + b"." + self._mac(payload).encode()).decode()

    def open(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """The payload of a reasoning item's encrypted content when it is genuine and belongs to
        this item (same id, same summary), else None."""
        sealed = item.get("encrypted_content")
        if not isinstance(sealed, str):
            return None
        try:
            raw = base64.b64decode(sealed.encode(), validate=True)
        except (binascii.Error, ValueError):
            return None
        payload, _, mac = raw.rpartition(b".")
        if not hmac.compare_digest(mac, self._mac(payload).encode()):
            return None
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id != data.get("id"):
            return None
        if summary_text(item) != data.get("summary"):
            return None
        return data


def abbreviate(opaque: str) -> str:
    """How OpenAI names an encrypted content in its error (first and last four characters)."""
    return f"{opaque[:4]}...{opaque[-4:]}" if len(opaque) > 8 else opaque


def seal_problems(items: list[Any], seal: Seal) -> list[tuple[int, str]]:
    """Reasoning and compaction items whose encrypted content this simulator did not issue for
    them."""
    problems: list[tuple[int, str]] = []
    for index, item in enumerate(items):
        if item_type(item) not in SEALED_TYPES:
            continue
        sealed = item.get("encrypted_content")
        if sealed is None or seal.open(item) is not None:
            continue
        if isinstance(item.get("id"), str):
            text = (
                f"The encrypted content for item {item['id']} could not be verified. "
                "Reason: Encrypted content could not be decrypted or parsed."
            )
        else:
            text = f"The encrypted content {abbreviate(str(sealed))} could not be verified."
        problems.append((index, text))
    return problems
