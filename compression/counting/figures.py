"""Token figures of one compression pass, each message counted once.

The counter caches per message in production; the figures also remember the counts of
the input's own message objects, so re-counting a candidate view costs only its new messages.
A view's total is the counter's fixed cost (priming, tool schemas) plus its messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compression.counting.tokens import count_each
from compression.engine import TokenCounter
from compression.messages.types import Message, ToolSchema


@dataclass(frozen=True, slots=True)
class PassFigures:
    counter: TokenCounter
    base: int  # tokens of an empty request: priming plus tool schemas
    tokens: list[int]  # per input message
    by_id: dict[int, int]

    @classmethod
    def measure(
        cls, messages: Sequence[Message], counter: TokenCounter, tools: Sequence[ToolSchema] | None
    ) -> PassFigures:
        tokens = count_each(counter, messages)
        by_id = {id(message): count for message, count in zip(messages, tokens, strict=True)}
        return cls(counter, counter.count_messages([], tools), tokens, by_id)

    @property
    def total(self) -> int:
        return self.base + sum(self.tokens)

    def span(self, start: int, end: int) -> int:
        return sum(self.tokens[start:end])

    def message(self, message: Message) -> int:
        known = self.by_id.get(id(message))
        return known if known is not None else self.counter.count_message(message)

    def view(self, messages: Sequence[Message]) -> int:
        return self.base + sum(self.message(message) for message in messages)
