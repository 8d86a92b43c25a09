"""What every front door checks first in a request body, with the same words for the same
mistakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from compression import ToolSchema
from session.errors import BadRequest, PayloadTooLarge

# A parsed JSON object whose fields the code at hand does not read, or reads one by one as it
# checks them: a request body (the door's own reader checks the fields it acts on; the rest
# ride along), an answer, an event's data.
JsonObject = dict[str, Any]


def json_object(raw: bytes) -> JsonObject:
    """The body as a JSON object, or BadRequest saying why it is not one."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return body


def within_message_cap(count: int, cap: int) -> None:
    """Refuse a request with more messages than `server.max_messages` (0: no cap)."""
    if cap and count > cap:
        raise PayloadTooLarge(
            f"The request holds {count:,} messages, over the {cap:,} this server accepts "
            "(server.max_messages)."
        )


def required_model(body: Mapping[str, Any]) -> str:
    """The body's `model` (OpenAI's wording when it is missing or not a string)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(missing_or_type("model", model, "a non-empty string"), param="model")
    return model


def missing_or_type(name: str, value: Any, expected: str) -> str:
    if value is None:
        return f"Missing required parameter: '{name}'."
    return f"'{name}' must be {expected}, got {json_type(value)}."


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, list):
        return "an array" if value else "an empty array"
    return "an object"


# (name, description, JSON schema of the parameters) -> the tool in a door's shape
ToolShape = Callable[[Any, str, Any], Mapping[str, object]]


def with_tools(client_tools: Any, tools: Sequence[ToolSchema], shape: ToolShape) -> list[Any]:
    """The client's tools, then each of ctxgate's (chat shape) in the door's `shape`, unless
    the client already has a tool of that name."""
    out: list[Any] = list(client_tools) if isinstance(client_tools, list) else []
    taken = {tool.get("name") for tool in out if isinstance(tool, dict)}
    for tool in tools:
        function = tool.get("function") or {}
        name = function.get("name")
        if name in taken:
            continue
        taken.add(name)
        schema = function.get("parameters", {"type": "object", "properties": {}})
        out.append(shape(name, function.get("description", ""), schema))
    return out
