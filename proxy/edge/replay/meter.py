"""What a provider would bill for a request: its prompt counted with ctxgate's tokenizer for
the model, split into cache tiers by the prefix it shares with the previous request of its
lane (pure but for the counters' caches).

The prompt cache is modelled as the providers bill it: OpenAI-shaped APIs and Gemini cache by
themselves (a prompt of 1,024 tokens or more reads its longest cached prefix, in 128-token
steps); Anthropic caches only where the request sets a `cache_control` breakpoint, reading the
shared prefix and writing the rest. A lane is one stream of requests that share a cache: the
agent's requests as sent, or ctxgate's forwarded ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from compression import Message, TokenCounter, ToolSchema
from proxy.doors.registry import Door
from session.ledger.tiers import AUTOMATIC_MIN, AUTOMATIC_STEP, Split
from session.ports.frontdoor import WireRequest

CounterFor = Callable[[str], TokenCounter]
_BREAKPOINT = b'"cache_control"'


@dataclass(slots=True)
class Lane:
    """The previous request of a stream of requests sharing a cache."""

    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSchema] | None = None


@dataclass(frozen=True, slots=True)
class Measured:
    request: WireRequest
    prompt: int
    split: Split


class Meter:
    def __init__(self, counter_for: CounterFor) -> None:
        self.counter_for = counter_for

    def measure(self, door: Door, raw: bytes, lane: Lane) -> Measured:
        request = door.parse(raw)
        counter = self.counter_for(request.model)
        prompt = counter.count_messages(request.messages, request.tools)
        shared = _shared(lane, request)
        prefix = min(prompt, counter.count_messages(request.messages[:shared], request.tools))
        lane.messages, lane.tools = request.messages, request.tools
        return Measured(request, prompt, tiers(door.api, raw, prompt, prefix if shared else 0))


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
