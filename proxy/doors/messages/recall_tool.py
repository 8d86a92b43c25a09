"""ctxgate's own tool in the Anthropic Messages API: offered, called, answered, hidden (pure).

    with_tools(client_tools, tools)     the `tools` field with ctxgate's tools added
    tool_calls(answer, name)            the answer's turn, when it calls `name`
    without_calls(answer, name)         the answer without those calls
    MessagesAnswerStream(name)          a stream added up into its Message
    MessagesCallFilter(name)            a relayed stream without those calls

The turn that calls the tool goes into the next round as the answer's content blocks
(thinking and redacted thinking with their signatures, which the API requires before a
`tool_use` when extended thinking is on; text; the `tool_use` blocks for `name`), and the
results follow as one user message of `tool_result` blocks (`messages_blocks` merges them).
`tool_use` blocks for the client's tools are left out: nothing answers them in this request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from compression import ToolSchema
from proxy.doors import bodies
from proxy.doors.messages.blocks import to_chat
from proxy.doors.messages.wire_types import (
    Answer,
    Block,
    Delta,
    Event,
    StreamEvent,
    Tool,
    WireMessage,
    answer_of,
    kind,
    read_event,
    text_of,
    thinking_of,
    tool_use,
)
from proxy.doors.sse_data import data_of, with_data
from session.ports.frontdoor import AnswerCalls, ToolCall

_INDEX = re.compile(rb'"index"\s*:\s*(\d+)')
_THINKING = frozenset({"thinking", "redacted_thinking"})
_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})


def with_tools(client_tools: list[Tool] | None, tools: Sequence[ToolSchema]) -> list[Any]:
    """The client's tools, then each of ctxgate's (chat shape) as a Messages tool, unless the
    client already has a tool of that name."""
    return bodies.with_tools(
        client_tools,
        tools,
        lambda name, description, schema: {
            "name": name,
            "description": description,
            "input_schema": schema,
        },
    )


def calls_tool(block: Block | None, name: str) -> bool:
    return isinstance(block, dict) and kind(block) == "tool_use" and block.get("name") == name


# -- a finished answer --------------------------------------------------------------------------


def tool_calls(answer: bytes, name: str) -> AnswerCalls | None:
    content = _content(answer_of(answer))
    if content is None:
        return None
    ours = [block for block in content if calls_tool(block, name)]
    if not ours:
        return None
    blocks = [block for block in content if isinstance(block, dict) and _replayed(block, name)]
    wire: WireMessage = {"role": "assistant", "content": blocks}
    calls = tuple(
        ToolCall(id=call.id, name=name, arguments=orjson.dumps(call.input).decode())
        for call in map(tool_use, ours)
    )
    return AnswerCalls(message=to_chat(None, [wire], compactions=False)[0], calls=calls)


def _content(message: Answer | None) -> list[Block] | None:
    content = message.get("content") if message is not None else None
    return content if isinstance(content, list) else None


def _replayed(block: Block, name: str) -> bool:
    block_kind = kind(block)
    if block_kind == "tool_use":
        return calls_tool(block, name)
    # The API refuses an empty text block in a request.
    return not (block_kind == "text" and not text_of(block))


def without_calls(answer: bytes, name: str) -> bytes:
    message = answer_of(answer)
    content = _content(message)
    if message is None or content is None:
        return answer
    kept = [block for block in content if not calls_tool(block, name)]
    if len(kept) == len(content):
        return answer
    changed: Answer = {**message, "content": kept}
    if message.get("stop_reason") == "tool_use" and not any(_is_call(b) for b in kept):
        changed["stop_reason"] = "end_turn"
    return orjson.dumps(changed)


def _is_call(block: Block | None) -> bool:
    return isinstance(block, dict) and kind(block) == "tool_use"


# -- streams ------------------------------------------------------------------------------------


class MessagesAnswerStream:
    """The Message a stream stands for: `message_start`'s message, its content blocks added up
    from their deltas, and `message_delta`'s stop reason and usage."""

    def __init__(self, name: str) -> None:
        self.decided: str | None = None
        self._name = name
        self._message: dict[str, object] = {}  # a Message, as its events add it up
        self._blocks: dict[int, Block] = {}
        self._json: dict[int, list[str]] = {}

    def feed(self, data: bytes) -> None:
        event = read_event(data)
        if event is None:
            return
        if event.type == "message_start" and event.message is not None:
            self._message = dict(event.message)
        elif event.type == "message_delta":
            self._delta(event)
        elif event.type in _BLOCK_EVENTS and event.block_index is not None:
            self._block_event(event, event.block_index)

    def _delta(self, event: StreamEvent) -> None:
        if event.delta is not None:
            self._message.update(event.delta)
        if event.usage is not None:
            before = self._message.get("usage")
            self._message["usage"] = {**(before if isinstance(before, dict) else {}), **event.usage}

    def _block_event(self, event: StreamEvent, index: int) -> None:
        if event.type == "content_block_start" and event.content_block is not None:
            started = event.content_block.copy()
            self._blocks[index] = started
            if self.decided is None and kind(started) not in _THINKING:
                self.decided = "recall" if calls_tool(started, self._name) else "answer"
            return
        block = self._blocks.get(index)
        if block is None:
            return
        if event.type == "content_block_stop":
            pieces = self._json.pop(index, None)
            if pieces is not None:
                text = "".join(pieces)
                block["input"] = _loads_input(text) if text.strip() else {}
        elif event.delta is not None:
            self._apply(index, block, event.delta)

    def _apply(self, index: int, block: Block, delta: Delta) -> None:
        delta_kind = delta.get("type")
        if delta_kind == "text_delta":
            block["text"] = str(text_of(block) or "") + str(delta.get("text") or "")
        elif delta_kind == "thinking_delta":
            block["thinking"] = str(thinking_of(block) or "") + str(delta.get("thinking") or "")
        elif delta_kind == "signature_delta":
            block["signature"] = delta.get("signature", "")
        elif delta_kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif delta_kind == "citations_delta" and isinstance(
            citation := delta.get("citation"), dict
        ):
            block["citations"] = [*(block.get("citations") or []), citation]

    def answer(self) -> bytes:
        message = self._message.copy()
        message["content"] = [self._blocks[index] for index in sorted(self._blocks)]
        return orjson.dumps(message)


def _loads_input(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}


class MessagesCallFilter:
    """Drops the content block events of `tool_use` blocks for `name`, renumbers the blocks
    after them, and makes the stop ordinary (`end_turn`) when the client got no `tool_use`.

    Until such a block shows up, an event that neither names the tool nor starts a `tool_use`
    block passes untouched after a byte search or two."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._marker = orjson.dumps(name)
        self._hidden: list[int] = []  # upstream indexes of hidden blocks, ascending
        self._client_calls = False  # a tool_use block of the client's reached the client

    @property
    def hid(self) -> bool:
        return bool(self._hidden)

    def event(self, event: bytes) -> bytes | None:
        if not self._hidden and self._marker not in event:
            if b'"tool_use"' in event and b"content_block_start" in event:
                self._client_calls = True
            return event
        # Only block starts and the message delta are parsed; a delta is renumbered in its bytes.
        if b"content_block_start" in event or b"message_delta" in event:
            parsed = read_event(data_of(event))
            if parsed is not None and parsed.type == "message_delta":
                return self._stop(event, parsed)
            if parsed is not None and parsed.type == "content_block_start":
                if parsed.block_index is not None:
                    return self._started(event, parsed, parsed.block_index)
        return self._renumbered(event)

    def _started(self, event: bytes, parsed: StreamEvent, index: int) -> bytes | None:
        if calls_tool(parsed.content_block, self._name):
            self._hidden = sorted({*self._hidden, index})
            return None
        self._client_calls = self._client_calls or _is_call(parsed.content_block)
        return self._renumbered(event, parsed.data, index)

    def _renumbered(
        self, event: bytes, parsed: Event | None = None, at: int | None = None
    ) -> bytes | None:
        # The first `"index"` is the event's own: Anthropic writes it before the block or
        # delta, and one inside a string would have its quotes escaped. A parsed event is
        # checked against that and re-serialised when its writer put the index after the block.
        found = _INDEX.search(event)
        index = at
        if index is None:
            if found is None:
                return event
            index = int(found.group(1))
        if index in self._hidden:
            return None
        shift = sum(1 for hidden in self._hidden if hidden < index)
        if not shift:
            return event
        if found is not None and int(found.group(1)) == index:
            return event[: found.start(1)] + str(index - shift).encode() + event[found.end(1) :]
        return with_data(event, orjson.dumps({**(parsed or {}), "index": index - shift}))

    def _stop(self, event: bytes, parsed: StreamEvent) -> bytes:
        delta = parsed.delta
        if not self._hidden or self._client_calls or delta is None:
            return event
        if delta.get("stop_reason") != "tool_use":
            return event
        changed: Event = {**parsed.data, "delta": {**delta, "stop_reason": "end_turn"}}
        return with_data(event, orjson.dumps(changed))
