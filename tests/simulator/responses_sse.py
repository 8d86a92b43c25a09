"""The Responses API's stream: the event sequence of one response, each event sent as
``event: NAME`` and ``data: {...}`` with a ``sequence_number``, in api.openai.com's order:
response.created, response.in_progress, then per output item output_item.added, its parts and
deltas, output_item.done, and last response.completed (or response.failed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .sse import split_text

TEXT_PIECE_CHARS = 12
ARGUMENT_PIECE_CHARS = 10

Event = dict[str, Any]  # an event's data, its ``type`` the SSE event name


def encode(event: Event) -> bytes:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def numbered(events: list[Event]) -> list[Event]:
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def opening(response: dict[str, Any]) -> list[Event]:
    """The lifecycle events every stream starts with (before any output or failure)."""
    return [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
    ]


def response_events(
    response: dict[str, Any], final: dict[str, Any], items: list[dict[str, Any]]
) -> list[Event]:
    """Every event of a completed response, numbered. ``response``: the in-progress object;
    ``final``: the completed one."""
    events = opening(response)
    for index, item in enumerate(items):
        events.extend(_item_events(index, item))
    events.append({"type": "response.completed", "response": final})
    return numbered(events)


def failure_events(response: dict[str, Any], failed: dict[str, Any]) -> list[Event]:
    """A stream that fails before any output: the opening events, then response.failed."""
    return numbered([*opening(response), {"type": "response.failed", "response": failed}])


def _item_events(index: int, item: dict[str, Any]) -> Iterator[Event]:
    kind = item["type"]
    if kind == "message":
        yield from _message_events(index, item)
    elif kind == "reasoning":
        yield from _reasoning_events(index, item)
    elif kind == "function_call":
        yield from _argument_events(
            index, item, "arguments", "response.function_call_arguments", {"arguments": ""}
        )
    elif kind == "custom_tool_call":
        yield from _argument_events(
            index, item, "input", "response.custom_tool_call_input", {"input": ""}
        )
    else:
        yield _added(index, item)
        yield _done(index, item)


def _added(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def _done(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def _message_events(index: int, item: dict[str, Any]) -> Iterator[Event]:
    yield _added(index, {**item, "status": "in_progress", "content": []})
    where = {"item_id": item["id"], "output_index": index}
    for content_index, part in enumerate(item["content"]):
        at = {**where, "content_index": content_index}
        empty = {**part, "text": ""}
        yield {"type": "response.content_part.added", **at, "part": empty}
        for piece in split_text(part["text"], TEXT_PIECE_CHARS):
            yield {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
        yield {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []}
        yield {"type": "response.content_part.done", **at, "part": part}
    yield _done(index, item)


def _reasoning_events(index: int, item: dict[str, Any]) -> Iterator[Event]:
    yield _added(index, {**item, "summary": []})
    where = {"item_id": item["id"], "output_index": index}
    for summary_index, part in enumerate(item["summary"]):
        at = {**where, "summary_index": summary_index}
        yield {"type": "response.reasoning_summary_part.added", **at, "part": {**part, "text": ""}}
        for piece in split_text(part["text"], TEXT_PIECE_CHARS):
            yield {"type": "response.reasoning_summary_text.delta", **at, "delta": piece}
        yield {"type": "response.reasoning_summary_text.done", **at, "text": part["text"]}
        yield {"type": "response.reasoning_summary_part.done", **at, "part": part}
    yield _done(index, item)


def _argument_events(
    index: int, item: dict[str, Any], field: str, prefix: str, empty: dict[str, str]
) -> Iterator[Event]:
    yield _added(index, {**item, "status": "in_progress", **empty})
    where = {"item_id": item["id"], "output_index": index}
    for piece in split_text(item[field], ARGUMENT_PIECE_CHARS):
        yield {"type": f"{prefix}.delta", **where, "delta": piece}
    yield {"type": f"{prefix}.done", **where, field: item[field]}
    yield _done(index, item)
