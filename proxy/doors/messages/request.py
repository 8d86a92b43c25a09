"""Reading an Anthropic Messages request body (pure).

Only what ctxgate acts on is checked (`model`, `system`, `messages`, `stream`, `max_tokens`,
`tools`, `metadata.user_id`); every other field stays in the body for the upstream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import orjson

from compression import Message, ToolSchema
from proxy.doors.bodies import json_object
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.messages.blocks import from_wire, to_chat
from proxy.doors.messages.compaction_blocks import holds_compaction
from proxy.doors.messages.wire_types import (
    Metadata,
    System,
    Tool,
    WireMessage,
    original,
)
from session.errors import BadRequest

_ROLES = frozenset({"user", "assistant", "system"})
# Older Claude Code versions: "user_<hash>_account_<uuid>_session_<uuid>".
_SESSION_IN_USER_ID = re.compile(r"session_([0-9A-Za-z-]{8,})")
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class MessagesBody:
    body: dict[str, Any]
    model: str
    messages: list[Message]
    stream: bool
    max_tokens: int | None
    tools: list[ToolSchema] | None
    session_hint: str | None
    image_marks: int | None = None  # see WireRequest


def read_body(raw: bytes, earlier: GrownBodies | None = None) -> MessagesBody:
    """The parts of a Messages body ctxgate uses; raises BadRequest on a malformed one.

    With `earlier`, a body that grew out of one read before is parsed, checked and converted
    only as far as it is new, and every body read is kept for those that grow out of it.
    """
    grown = earlier.find(raw) if earlier is not None else None
    body = json_object(raw) if grown is None else grown.body
    known = 0 if grown is None else grown.known
    read = _read(body, known, grown.derived if grown is not None else None)
    if earlier is not None:
        if grown is None:
            earlier.keep(raw, body, read.messages)
        else:
            earlier.keep_grown(raw, grown, read.messages)
            read = replace(read, image_marks=grown.marks)
    return read


def _read(body: dict[str, Any], known: int, converted: list[Message] | None) -> MessagesBody:
    """`known` leading messages were checked before, and made `converted` (when given)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required (a non-empty string).", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages: Input should be a valid list.", param="messages")
    for index in range(known, len(messages)):
        _check_message(index, messages[index])
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise BadRequest("system: Input should be a string or a list of blocks.", param="system")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise BadRequest("stream: Input should be a valid boolean.", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools: Input should be a valid list.", param="tools")
    # Checked: from here on the body is what `RequestBody` says.
    return MessagesBody(
        body=body,
        model=model,
        messages=_chat_messages(system, messages, known, converted),
        stream=stream,
        max_tokens=_max_tokens(body.get("max_tokens")),
        tools=tools_as_chat(tools),
        session_hint=session_hint(body.get("metadata")),
    )


def _chat_messages(
    system: System | None, messages: list[WireMessage], known: int, converted: list[Message] | None
) -> list[Message]:
    added = messages[known:]
    if converted is not None and not _converted_anew(converted, added, known):
        return [*converted, *(m for message in added for m in from_wire(message))]
    blocks = [b for b in system if isinstance(b, dict)] if isinstance(system, list) else system
    return to_chat(blocks, messages)


def _converted_anew(converted: list[Message], added: list[WireMessage], known: int) -> bool:
    """Whether added messages change how the kept ones convert. Each wire message converts on
    its own, but one with role "system" joins the message before it; a new compaction block
    moves the cut; and the results answering a compaction turn's calls join its head."""
    if any(m["role"] == "system" or holds_compaction(m) for m in added):
        return True
    for message in converted[:2]:
        kept = original(message)
        if kept is not None and "compaction" in kept:
            return bool(added) and kept["compaction"]["end"] >= known
    return False


def _check_message(index: int, message: Any) -> None:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        raise BadRequest(f"{where}: Input should be a valid dictionary.", param=where)
    if message.get("role") not in _ROLES:
        raise BadRequest(
            f"{where}.role: Input should be 'user' or 'assistant'.", param=f"{where}.role"
        )
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise BadRequest(
            f"{where}.content: Input should be a string or a list of content blocks.",
            param=f"{where}.content",
        )


def _max_tokens(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(
            f"max_tokens: Input should be a positive integer, got {value!r}.", param="max_tokens"
        )
    return value


def session_hint(metadata: Metadata | None) -> str | None:
    """The session id Claude Code puts in `metadata.user_id` (a JSON string, or the older
    `user_…_session_<uuid>` form)."""
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user_id, str) or not user_id.strip():
        return None
    try:
        parsed = orjson.loads(user_id)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        value = parsed.get("session_id")
        return value.strip()[:_MAX_ID] if isinstance(value, str) and value.strip() else None
    match = _SESSION_IN_USER_ID.search(user_id)
    return match.group(1)[:_MAX_ID] if match else None


def tools_as_chat(tools: list[Tool] | None) -> list[ToolSchema] | None:
    """Anthropic tool definitions in chat shape, for counting their tokens."""
    if not isinstance(tools, list):
        return None
    out: list[ToolSchema] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = {
            "name": tool.get("name", ""),
            "description": tool.get("description", ""),
            "parameters": tool.get("input_schema", {}),
        }
        out.append({"type": "function", "function": function})
    return out
