"""What a provider would bill for a request: its prompt counted with ctxgate's tokenizer for
the model, split into cache tiers by the prefix it shares with the previous request of its
lane (pure but for the counters' caches).

A prompt is counted as OpenAI documents its billing of chat messages (3 tokens a message, its
role, text, name and tool calls, 3 to prime the reply, the tool schemas as compact JSON), not
with the margins ctxgate's own estimates keep for safety: what ctxgate would forward is
measured as a provider would bill it, and ctxgate calibrates its estimates against that as it
does against a real provider.

The prompt cache is modelled as the providers bill it: OpenAI-shaped APIs and Gemini cache by
themselves (a prompt of 1,024 tokens or more reads its longest cached prefix, in 128-token
steps); Anthropic caches only where the request sets a `cache_control` breakpoint, reading the
shared prefix and writing the rest. A lane is one stream of requests that share a cache: the
agent's requests as sent, or ctxgate's forwarded ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from compression import IMAGE_PARTS, Message, TokenCounter, ToolSchema
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.registry import Door
from session.ledger.tiers import AUTOMATIC_MIN, AUTOMATIC_STEP, Split
from session.ports.frontdoor import ORIGINAL, WireRequest

CounterFor = Callable[[str], TokenCounter]
CountText = Callable[[str], int]
_REMEMBERED = 200_000  # texts whose count is kept
_BREAKPOINT = b'"cache_control"'
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
IMAGE_TOKENS = 765  # a high-detail 512-pixel tile, OpenAI's figure


@dataclass(slots=True)
class Lane:
    """The previous request of a stream of requests sharing a cache, and the bodies parsed
    before (a grown body is parsed only as far as it is new, as the gateway does)."""

    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSchema] | None = None
    earlier: dict[str, GrownBodies] = field(default_factory=dict)

    def bodies(self, door: Door) -> GrownBodies | None:
        if door.grows is None:
            return None
        if door.api not in self.earlier:
            self.earlier[door.api] = GrownBodies(door.grows)
        return self.earlier[door.api]


@dataclass(frozen=True, slots=True)
class Measured:
    request: WireRequest
    prompt: int
    split: Split


class Meter:
    def __init__(self, counter_for: CounterFor) -> None:
        self.counter_for = counter_for
        self._texts: dict[str, int] = {}  # an agent sends each message again and again

    def measure(self, door: Door, raw: bytes, lane: Lane) -> Measured:
        earlier = lane.bodies(door)
        request = door.parse(raw, earlier)
        if earlier is not None:
            earlier.settle()
        counter = self.counter_for(request.model)
        tools = billed_tools(counter, request.tools)
        counts = [billed_message(self._count(counter), m) for m in request.messages]
        prompt = sum(counts) + tools + REPLY_PRIMING
        shared = _shared(lane, request)
        prefix = sum(counts[:shared]) + tools
        lane.messages, lane.tools = request.messages, request.tools
        return Measured(request, prompt, tiers(door.api, raw, prompt, prefix if shared else 0))

    def _count(self, counter: TokenCounter) -> CountText:
        texts = self._texts

        def count(text: str) -> int:
            n = texts.get(text)
            if n is None:
                if len(texts) >= _REMEMBERED:
                    texts.clear()
                n = texts[text] = counter.count_text(text)
            return n

        return count


def billed_message(count: CountText, message: Message) -> int:
    items = cast(dict[str, Any], message).get(ORIGINAL)
    if isinstance(items, list):  # Responses items, billed one by one
        return sum(billed_item(count, item) for item in items)
    n = PER_MESSAGE + count(str(message.get("role") or ""))
    content = message.get("content")
    for part in content if isinstance(content, list) else [content]:
        n += _part(count, part)
    if message.get("name"):
        n += count(str(message.get("name"))) + PER_NAME
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            n += count(str(fn.get("name") or ""))
            n += _part(count, fn.get("arguments"))
    return n


def billed_item(count: CountText, item: Any) -> int:
    """A Responses input item: like a chat message, 3 tokens and its text. A reasoning item's
    reasoning is encrypted: it is counted as long as its summary, which it is at least."""
    if not isinstance(item, dict):
        return PER_MESSAGE + _part(count, item)
    kind = item.get("type", "message")
    if kind == "message":
        content = item.get("content")
        parts = content if isinstance(content, list) else [content]
        return (
            PER_MESSAGE + count(str(item.get("role") or "")) + sum(_part(count, p) for p in parts)
        )
    if kind == "reasoning":
        summary = item.get("summary")
        texts = [_part(count, p) for p in summary] if isinstance(summary, list) else [0]
        return PER_MESSAGE + 2 * sum(texts)
    if kind in ("function_call", "custom_tool_call"):
        value = item.get("arguments") if kind == "function_call" else item.get("input")
        return PER_MESSAGE + count(str(item.get("name") or "")) + _part(count, value)
    if "output" in item:
        output = item["output"]
        parts = output if isinstance(output, list) else [output]
        return PER_MESSAGE + sum(_part(count, p) for p in parts)
    visible = {k: v for k, v in item.items() if k not in ("id", "type", "status")}
    return PER_MESSAGE + _part(count, visible)


def billed_tools(counter: TokenCounter, tools: list[ToolSchema] | None) -> int:
    if not tools:
        return 0
    return counter.count_text(orjson.dumps(tools).decode())


def _part(count: CountText, part: Any) -> int:
    if part is None:
        return 0
    if isinstance(part, str):
        return count(part)
    if isinstance(part, dict):
        if part.get("type") in IMAGE_PARTS:
            return IMAGE_TOKENS
        for key in ("text", "refusal"):
            if isinstance(part.get(key), str):
                return count(part[key])
    return count(orjson.dumps(part).decode())


def tiers(api: str, raw: bytes, prompt: int, prefix: int) -> Split:
    """The billing tiers of a prompt of `prompt` tokens whose first `prefix` tokens the
    previous request of its lane also sent."""
    if api == "messages":
        if _BREAKPOINT not in raw:
            return Split(uncached=prompt)
        return Split(cache_read=prefix, cache_write=prompt - prefix)
    cached = prefix // AUTOMATIC_STEP * AUTOMATIC_STEP if prefix >= AUTOMATIC_MIN else 0
    return Split(uncached=prompt - cached, cache_read=cached)


def _shared(lane: Lane, request: WireRequest) -> int:
    """How many leading messages the request shares with the lane's previous one (none when
    the tool schemas, which come first in the prompt, changed)."""
    if lane.tools != request.tools:
        return 0
    shared = 0
    for old, new in zip(lane.messages, request.messages, strict=False):
        if old != new:
            break
        shared += 1
    return shared
