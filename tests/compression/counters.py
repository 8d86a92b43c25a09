"""A deterministic token counter for tests: characters / 4 plus a per-message overhead."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from compression.messages.types import Message, ToolSchema

PER_MESSAGE = 4
PRIMING = 3
IMAGE_TOKENS = 85


class CharCounter:
    """Implements `compression.engine.TokenCounter`; additive like the production counter."""

    def __init__(self) -> None:
        self.text_calls = 0

    def count_text(self, text: str) -> int:
        self.text_calls += 1
        return (len(text) + 3) // 4

    def count_message(self, message: Message) -> int:
        total = PER_MESSAGE + self._content(message.get("content"))
        for call in message.get("tool_calls") or []:
            function: Any = call.get("function") if isinstance(call, dict) else None
            function = function if isinstance(function, dict) else {}
            total += 4 + self._chars(function.get("name")) + self._chars(function.get("arguments"))
        for key in ("name", "tool_call_id"):
            total += self._chars(message.get(key))
        return total

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None
    ) -> int:
        tools_tokens = (len(json.dumps(list(tools))) + 3) // 4 if tools else 0
        return PRIMING + tools_tokens + sum(self.count_message(m) for m in messages)

    def _content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return (len(content) + 3) // 4
        total = 0
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                total += IMAGE_TOKENS
            elif isinstance(part, dict):
                total += self._chars(part.get("text"))
        return total

    @staticmethod
    def _chars(value: Any) -> int:
        return (len(value) + 3) // 4 if isinstance(value, str) else 0
