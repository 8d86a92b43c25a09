"""Parsing and validating a Chat Completions request body.

Only the fields ctxgate acts on are checked (`model`, `messages`, `stream`, `max_tokens`,
`tools`); everything else stays in `body` untouched. The raw bytes are kept so that a request
ctxgate does not change is forwarded byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from compression import IMAGE_PARTS, Message, ToolSchema
from proxy.doors.bodies import (
    json_object,
    json_type,
    missing_or_type,
    required_model,
    within_message_cap,
)
from proxy.doors.chat.shapes import Metadata, StreamOptions, is_call
from proxy.doors.grown_bodies import Grown, GrownBodies
from proxy.doors.sse_data import text_at
from session.errors import BadRequest
from session.ports.frontdoor import WireRequest

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def stream_options(body: Mapping[str, Any]) -> StreamOptions | None:
    """The body's `stream_options`, when it is an object (it is forwarded as it came)."""
    options: StreamOptions | None = body.get("stream_options")
    return options if type(options) is dict else None


def client_wants_usage(body: Mapping[str, Any]) -> bool:
    options = stream_options(body)
    return options is not None and bool(options.get("include_usage"))


def parse_chat_request(
    raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
) -> WireRequest:
    """Parse and check `raw`, raising BadRequest with a message that says what is wrong.

    With `earlier`, a body that grew out of one parsed before, or is one edited, is parsed
    and checked only as far as it is new, and every checked body is kept for the requests
    that grow out of it.

    More messages than `max_messages` (0: no cap) are refused with PayloadTooLarge before
    any is checked or the body kept: a refusal costs the parse only.
    """
    grown = earlier.find(raw, edits=True) if earlier is not None else None
    body = json_object(raw) if grown is None else grown.body
    model = required_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(
            missing_or_type("messages", messages, "a non-empty array"), param="messages"
        )
    within_message_cap(len(messages), max_messages)
    if grown is None:
        marks: int | None = _check_messages(messages)
    else:  # the kept body's messages, before and after what is new, passed then
        added = _check_messages(messages[grown.known : len(messages) - grown.tail], grown.known)
        marks = _images_now(grown, added)
    request = _wire_request(raw, body, model, messages, marks)
    if earlier is not None:
        if grown is None:
            earlier.keep(raw, body, marks=marks)
        else:
            earlier.keep_grown(raw, grown, marks=marks)
    return request


def _images_now(grown: Grown, added: int) -> int | None:
    """The image parts of a body grown or edited out of a kept one: the kept body's count
    (parts counted as its messages were checked), less those of the messages it replaced,
    plus `added`, those of the messages put in."""
    kept = grown.source.marks
    if kept is None:
        return grown.marks
    before: list[Message] = grown.source.body["messages"]
    replaced = before[grown.known : len(before) - grown.tail]
    return kept - sum(_image_parts(m.get("content")) for m in replaced) + added


def _image_parts(content: object) -> int:
    """The image parts of a message's checked `content`."""
    if type(content) is not list:
        return 0
    return sum(part.get("type") in IMAGE_PARTS for part in content)


def _wire_request(
    raw: bytes, body: dict[str, Any], model: str, messages: list[Any], marks: int | None
) -> WireRequest:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest(f"'stream' must be a boolean, got {json_type(stream)}.", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest(f"'tools' must be an array, got {json_type(tools)}.", param="tools")
    return WireRequest(
        raw=raw,
        body=body,
        model=model,
        messages=cast(list[Message], messages),
        stream=stream,
        max_tokens=_max_tokens(body),
        tools=cast(list[ToolSchema] | None, tools),
        session_hint=_metadata_session(body),
        image_marks=marks,
    )


def _metadata_session(body: Mapping[str, Any]) -> str | None:
    metadata: Metadata | None = body.get("metadata")
    return text_at(metadata, "session_id") if type(metadata) is dict else None


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadRequest(f"'{key}' must be a positive integer, got {value!r}.", param=key)
        return value
    return None


def _check_message(index: int, message: Any) -> None:
    _check_messages([message], index)


def _check_messages(messages: list[Any], start: int = 0) -> int:
    """Check `messages`; return how many image parts they hold (what `upper_bound` adds for,
    found here without scanning the body's bytes for them)."""
    # Runs over every message of every request: one loop without a call per message, whose
    # common valid shapes pass after a few type checks (a 600-message history in ~50 µs);
    # anything else is looked at again by `_check_message_fully`, which words the error.
    roles = _ROLES
    images = 0
    for index, message in enumerate(messages, start):
        if type(message) is dict:
            role = message.get("role")
            content = message.get("content")
            if (
                type(role) is str
                and role in roles
                and (content is None or type(content) is str)
                and (role != "tool" or type(message.get("tool_call_id")) is str)
            ):
                tool_calls = message.get("tool_calls")
                if tool_calls is None or _plain_tool_calls(tool_calls):
                    continue
            _check_message_fully(f"messages[{index}]", message, role, content)
            images += _image_parts(content)
        else:
            raise BadRequest(
                f"'messages[{index}]' must be an object, got {json_type(message)}.",
                param=f"messages[{index}]",
            )
    return images


def _plain_tool_calls(tool_calls: Any) -> bool:
    """`is_call` for every call, inline: this runs for every assistant turn of a request."""
    if type(tool_calls) is not list:
        return False
    for call in tool_calls:
        if type(call) is not dict or type(call.get("id")) is not str:
            return False
        if type(call.get("function")) is not dict:
            return False
    return True


def _check_message_fully(where: str, message: Mapping[str, Any], role: Any, content: Any) -> None:
    if not isinstance(role, str) or role not in _ROLES:
        raise BadRequest(
            f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}, got {role!r}.",
            param=f"{where}.role",
        )
    if content is not None and not isinstance(content, (str, list)):
        raise BadRequest(
            f"'{where}.content' must be a string, an array of parts or null, "
            f"got {json_type(content)}.",
            param=f"{where}.content",
        )
    if isinstance(content, list) and not all(isinstance(part, dict) for part in content):
        raise BadRequest(f"'{where}.content' parts must be objects.", param=f"{where}.content")
    if role == "tool" and text_at(message, "tool_call_id") is None:
        raise BadRequest(
            f"'{where}' is a tool message without a string 'tool_call_id'.",
            param=f"{where}.tool_call_id",
        )
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        _check_tool_calls(where, tool_calls)


def _check_tool_calls(where: str, tool_calls: Any) -> None:
    if not isinstance(tool_calls, list):
        raise BadRequest(
            f"'{where}.tool_calls' must be an array, got {json_type(tool_calls)}.",
            param=f"{where}.tool_calls",
        )
    for i, call in enumerate(tool_calls):
        if not is_call(call):
            raise BadRequest(
                f"'{where}.tool_calls[{i}]' must be an object with a string 'id' and a "
                "'function' object.",
                param=f"{where}.tool_calls[{i}]",
            )
