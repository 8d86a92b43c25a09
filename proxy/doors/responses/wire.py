"""Responses request and answer bodies: parsing, rendering, usage, the summary call (pure).

Only the fields ctxgate acts on are checked (`model`, `input`, `instructions`, `stream`,
`max_output_tokens`, `tools`); everything else stays in `body` untouched, and the raw bytes
are forwarded as they came when nothing changes.

A request whose history lives on the provider is never compressed (`passthrough`):
`previous_response_id` or `conversation` (ctxgate sees only the newest items), and a
`compaction_trigger` item (the provider compacts; the answer is its compaction item).
`store` does not matter: a request that carries its whole history is compressible whether
or not the provider keeps a copy of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson

from compression import (
    Message,
    SummaryCall,
    SummaryCallError,
    SummaryReply,
    ToolSchema,
    content_text,
)
from proxy.doors.bodies import json_object, required_model
from proxy.doors.grown_bodies import Grown, GrownBodies
from proxy.doors.responses.compaction_items import compaction_cut, is_compaction
from proxy.doors.responses.items import Grouped, converted, grouped_from, regroup
from proxy.doors.responses.render import to_items
from proxy.doors.responses.stream import usage_of
from proxy.doors.responses.wire_shapes import ResponsesBody
from proxy.doors.sse_data import objects, text_at
from session.errors import BadRequest
from session.ports.frontdoor import Usage, WireRequest

PREVIOUS_RESPONSE = (
    "previous_response_id: the history is kept by the provider, where ctxgate cannot see it"
)
CONVERSATION = "conversation: the history is kept by the provider, where ctxgate cannot see it"
COMPACTION_TRIGGER = "compaction_trigger: the provider compacts this history itself"


def parse_request(raw: bytes, earlier: GrownBodies | None = None) -> WireRequest:
    """Parse and check `raw`, raising BadRequest with a message that says what is wrong.

    With `earlier`, a body that grew out of one parsed before is parsed, checked, grouped and
    converted only as far as it is new (a turn's group it extends is converted again), and
    every body parsed is kept for those that grow out of it.
    """
    grown = earlier.find(raw) if earlier is not None else None
    body = json_object(raw) if grown is None else grown.body
    known = 0 if grown is None else grown.known
    model = required_model(body)
    items = _input_items(body.get("input"), known)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string.", param="instructions")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean.", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("'tools' must be an array.", param="tools")
    hint = body.get("prompt_cache_key")
    grouped, messages = _conversation(items, known, instructions, grown)
    request = WireRequest(
        raw=raw,
        body=body,
        model=model,
        messages=messages,
        stream=bool(stream),
        max_tokens=_max_output_tokens(body),
        tools=chat_tools(tools),
        session_hint=hint.strip()[:200] if isinstance(hint, str) and hint.strip() else None,
        passthrough=passthrough_reason(body, items),
        image_marks=grown.marks if grown is not None else None,
    )
    if earlier is not None:
        if grown is None:
            earlier.keep(raw, body, (grouped, messages))
        else:
            earlier.keep_grown(raw, grown, (grouped, messages))
    return request


def _conversation(
    items: list[Any], known: int, instructions: str | None, grown: Grown | None
) -> tuple[Grouped, list[Message]]:
    """The items grouped and converted, going on from what the kept body's were (unless a
    new compaction item moves the cut)."""
    before: tuple[Grouped, list[Message]] | None = grown.derived if grown is not None else None
    if before is not None and _cut_moved(before[0], items, known):
        before = None
    if before is None:
        grouped = grouped_from(items)
    else:
        grouped = regroup(before[0], items[known:])
    return grouped, converted(grouped, instructions, before)


def _cut_moved(before: Grouped, items: list[Any], known: int) -> bool:
    """Whether the added items move the compaction cut: a new compaction item, or an output
    answering a call of the head."""
    if not before.head:
        return any(is_compaction(item) for item in items[known:])
    return compaction_cut(items) != len(before.head)


def _input_items(value: Any, known: int = 0) -> list[Any]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("'input' must be a string or an array of items.", param="input")
    for index in range(known, len(value)):
        if not isinstance(value[index], dict):
            raise BadRequest(f"'input[{index}]' must be an object.", param=f"input[{index}]")
    return value


def _max_output_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(
            f"'max_output_tokens' must be a positive integer, got {value!r}.",
            param="max_output_tokens",
        )
    return value


def passthrough_reason(body: Mapping[str, Any], items: Sequence[Any]) -> str | None:
    if body.get("previous_response_id"):
        return PREVIOUS_RESPONSE
    if body.get("conversation"):
        return CONVERSATION
    if any(item.get("type") == "compaction_trigger" for item in items):
        return COMPACTION_TRIGGER
    return None


def chat_tools(tools: list[Any] | None) -> list[ToolSchema] | None:
    """Tool schemas in chat shape, for counting: a function tool's schema moves under
    `function`; built-in and custom tools are counted as they are."""
    if not tools:
        return None
    shaped: list[ToolSchema] = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function":
            function = {k: v for k, v in tool.items() if k != "type"}
            shaped.append({"type": "function", "function": function})
        else:
            shaped.append(cast(ToolSchema, tool))
    return shaped


def render_request(request: WireRequest, view: list[Message], max_tokens: int | None) -> bytes:
    return orjson.dumps(request_body(request, view, max_tokens))


def request_body(
    request: WireRequest, view: list[Message], max_tokens: int | None
) -> dict[str, object]:
    body: dict[str, object] = dict(request.body)
    body["input"] = to_items(view, request.messages)
    if max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    return body


def answer_usage(answer: bytes) -> Usage | None:
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    return usage_of(data)


def summary_body(call: SummaryCall, model: str) -> bytes:
    """The summary call as one Responses request: system text as `instructions`, the rest as
    one user message."""
    system = [content_text(m) for m in call.messages if _instructing(m)]
    other = [content_text(m) for m in call.messages if not _instructing(m)]
    body: ResponsesBody = {
        "model": call.model or model,
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "\n\n".join(other)}],
            }
        ],
        "max_output_tokens": call.max_tokens,
        "stream": False,
        "store": False,
    }
    if system:
        body["instructions"] = "\n\n".join(system)
    return orjson.dumps(body)


def summary_reply(answer: bytes) -> SummaryReply:
    """The reply text from the output message items, with the finish mapped to chat's terms."""
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError as exc:
        raise SummaryCallError("summary model sent an unreadable answer") from exc
    output = data.get("output") if isinstance(data, dict) else None
    if not isinstance(output, list):
        raise SummaryCallError("summary model sent an answer without output items")
    texts = [
        text
        for item in objects(output)
        if text_at(item, "type") == "message"
        for part in objects(item.get("content"))
        if text_at(part, "type") == "output_text" and (text := text_at(part, "text")) is not None
    ]
    usage = usage_of(data)
    return SummaryReply(
        text="".join(texts),
        finish_reason=_finish_reason(data),
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
    )


def _instructing(message: Message) -> bool:
    """Whether a summary call's message goes into `instructions`."""
    return message.get("role") in ("system", "developer")


def _finish_reason(data: Mapping[str, object]) -> str | None:
    """A `Response`'s status in chat's terms (`finish_reason`)."""
    status = data.get("status")
    if status == "completed":
        return "stop"
    details = data.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict):
        reason = details.get("reason")
        return "length" if reason == "max_output_tokens" else str(reason)
    return status if isinstance(status, str) else None
