"""ctxgate's own tool in the Responses API: offered, called, answered, hidden (pure).

    render_request(request, view, max_tokens, tools)  the body with ctxgate's tools added
    tool_calls(answer, name)                          the answer's turn, when it calls `name`
    without_calls(answer, name)                       the answer without those calls
    ResponsesAnswerStream(name)                       a stream added up into its answer
    ResponsesCallFilter(name)                         a relayed stream without those calls

The turn that calls the tool goes into the next round as the answer's output items (reasoning
with its `encrypted_content`, messages, the calls to `name`), followed by a
`function_call_output` per call. Calls to the client's tools are left out: nothing answers
them in this request, and so is reasoning that led only to them (the API refuses a reasoning item
without the item that followed it). When the provider keeps nothing (`store: false`) an item id
names nothing it can look up: message and function_call items go back without theirs, as Codex
sends them, and a reasoning item without `encrypted_content` (nothing but an id) is left out; a
reasoning item with it keeps its id, which the encrypted content is bound to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

import orjson

from compression import Message, ToolSchema
from proxy.doors import bodies
from proxy.doors.responses.items import group_message, item_kind
from proxy.doors.responses.stream import event_type
from proxy.doors.responses.wire import request_body
from proxy.doors.responses.wire_shapes import FunctionTool, Item, Response
from proxy.doors.sse_data import count_at, data_of, json_object, text_at, with_data
from session.ports.frontdoor import ORIGINAL, AnswerCalls, ToolCall, WireRequest

LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})
ENDS = frozenset({"response.completed", "response.done", "response.incomplete", "response.failed"})
ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
# Items Codex replays without their ids when the provider keeps nothing (`store: false`).
_ID_FREE = frozenset({"message", "function_call"})
_OUTPUT_INDEX = re.compile(rb'"output_index"\s*:\s*(\d+)')


# -- the request --------------------------------------------------------------------------------


def render_request(
    request: WireRequest,
    view: list[Message],
    max_tokens: int | None,
    tools: Sequence[ToolSchema],
) -> bytes:
    body = request_body(request, view, max_tokens)
    body["tools"] = with_tools(body.get("tools"), tools)
    return orjson.dumps(body)


def with_tools(client_tools: Any, tools: Sequence[ToolSchema]) -> list[Any]:
    """The client's tools, then each of ctxgate's (chat shape) as a Responses function tool,
    unless the client already has a tool of that name."""
    return bodies.with_tools(client_tools, tools, _function_tool)


def _function_tool(name: Any, description: str, schema: Any) -> FunctionTool:
    return {"type": "function", "name": name, "description": description, "parameters": schema}


# -- a finished answer --------------------------------------------------------------------------


def calls_tool(item: Any, name: str) -> bool:
    """Whether `item` is a `function_call` item calling `name` (with its `call_id`)."""
    return (
        isinstance(item, dict)
        and text_at(item, "type") == "function_call"
        and text_at(item, "name") == name
        and text_at(item, "call_id") is not None
    )


def output_of(response: object) -> list[Any] | None:
    """A `Response`'s `output` items, when it is an object that has them."""
    output = response.get("output") if isinstance(response, dict) else None
    return output if isinstance(output, list) else None


def tool_calls(answer: bytes, name: str) -> AnswerCalls | None:
    response = json_object(answer)
    output = output_of(response)
    if response is None or output is None:
        return None
    ours = [item for item in output if calls_tool(item, name)]
    if not ours:
        return None
    stateless = response.get("store") is False
    items = [
        replayed
        for item in _kept(output, name)
        if (replayed := _replayed(item, stateless)) is not None
    ]
    message: dict[str, object] = {**group_message(items), ORIGINAL: items}
    calls = tuple(
        ToolCall(id=item["call_id"], name=name, arguments=_text(item.get("arguments")))
        for item in ours
    )
    return AnswerCalls(message=cast(Message, message), calls=calls)


def _kept(output: list[Any], name: str) -> list[Any]:
    """The output without calls to other tools, and without the reasoning that led to one
    (the API refuses a reasoning item sent without the item that followed it)."""
    out: list[Any] = []
    dropping = False  # the next item that is not reasoning is left out
    for item in reversed(output):
        kind = item_kind(item)
        if kind == "reasoning":
            if not dropping:
                out.append(item)
            continue
        dropping = kind == "call" and not calls_tool(item, name)
        if not dropping:
            out.append(item)
    return out[::-1]


def _replayed(item: Any, stateless: bool) -> Any:
    if not stateless or not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind == "reasoning":
        return item if item.get("encrypted_content") else None
    if kind in _ID_FREE and "id" in item:
        return {key: value for key, value in item.items() if key != "id"}
    return item


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def without_calls(answer: bytes, name: str) -> bytes:
    response = json_object(answer)
    output = output_of(response)
    if response is None or output is None:
        return answer
    kept = [item for item in output if not calls_tool(item, name)]
    if len(kept) == len(output):
        return answer
    return orjson.dumps({**response, "output": kept})


# -- streams ------------------------------------------------------------------------------------


class ItemRead(NamedTuple):
    """An `ItemEvent`'s output index and item, when both are of their documented types."""

    output_index: int
    item: Item

    @classmethod
    def of(cls, event: Mapping[str, object] | None) -> ItemRead | None:
        if event is None:
            return None
        index, item = count_at(event, "output_index"), event.get("item")
        if index is None or not isinstance(item, dict):
            return None
        return cls(index, cast(Item, item))


def response_of(event: Mapping[str, object] | None) -> Response | None:
    """A `ResponseEvent`'s `response`, when it is an object."""
    response = event.get("response") if event is not None else None
    return cast(Response, response) if isinstance(response, dict) else None


class ResponsesAnswerStream:
    """The answer a Responses stream stands for: the `response` of its last lifecycle event
    (`response.completed`), its output filled in from `output_item.done` events when the
    provider left it empty or never finished."""

    def __init__(self, name: str) -> None:
        self.decided: str | None = None
        self._name = name
        self._response: Response = {}
        self._items: dict[int, Item] = {}
        self._finished = False

    def feed(self, data: bytes) -> None:
        kind = event_type(data)
        if kind not in LIFECYCLE and kind not in ENDS and kind not in ITEM_EVENTS:
            return
        event = json_object(data)
        if kind in ITEM_EVENTS:
            read = ItemRead.of(event)
            if read is not None:
                self._item_event(kind, read)
            return
        response = response_of(event)
        if response is not None and not self._finished:
            self._response = response
            self._finished = kind in ENDS

    def _item_event(self, kind: str | None, read: ItemRead) -> None:
        if self.decided is None and item_kind(read.item) != "reasoning":
            self.decided = "recall" if calls_tool(read.item, self._name) else "answer"
        if kind == "response.output_item.done":
            self._items[read.output_index] = read.item

    def answer(self) -> bytes:
        response = dict(self._response)
        if not output_of(response) and self._items:
            response["output"] = [self._items[index] for index in sorted(self._items)]
        return orjson.dumps(response)


class ResponsesCallFilter:
    """Drops the events of output items that call `name`, renumbers `output_index` of the
    items after them, and takes those items out of the `response` of lifecycle events.

    Until such an item shows up, an event without the tool's quoted name passes untouched
    after one byte search."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._marker = orjson.dumps(name)
        self._hidden: list[int] = []  # upstream output indexes of hidden items, ascending

    @property
    def hid(self) -> bool:
        return bool(self._hidden)

    def event(self, event: bytes) -> bytes | None:
        if not self._hidden and self._marker not in event:
            return event
        # Only item and lifecycle events are parsed; a delta is renumbered in its bytes.
        if b"response.output_item." in event or b'"response":' in event:
            data = data_of(event)
            kind = event_type(data)
            if kind in LIFECYCLE or kind in ENDS:
                return self._lifecycle(event, data)
            read = ItemRead.of(json_object(data)) if kind in ITEM_EVENTS else None
            if read is not None and calls_tool(read.item, self._name):
                if read.output_index not in self._hidden:
                    self._hidden = sorted([*self._hidden, read.output_index])
                return None
        return self._renumbered(event)

    def _renumbered(self, event: bytes) -> bytes | None:
        # The first `"output_index"` is the event's own: no nested object has that key, and
        # one inside a string would have its quotes escaped.
        found = _OUTPUT_INDEX.search(event)
        if found is None:
            return event
        index = int(found.group(1))
        if index in self._hidden:
            return None
        shift = sum(1 for hidden in self._hidden if hidden < index)
        if not shift:
            return event
        return event[: found.start(1)] + str(index - shift).encode() + event[found.end(1) :]

    def _lifecycle(self, event: bytes, data: bytes) -> bytes:
        parsed = json_object(data)
        response = response_of(parsed)
        output = output_of(response)
        if parsed is None or response is None or output is None:
            return event
        kept = [item for item in output if not calls_tool(item, self._name)]
        if len(kept) == len(output):
            return event
        parsed["response"] = {**response, "output": kept}
        return with_data(event, orjson.dumps(parsed))
