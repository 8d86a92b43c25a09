"""Placeholder for the lead's front-door seam (replaced by `seam-v1` on merge)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from compression.types import Message, ToolSchema

ORIGINAL = "_ctxgate_original"


@dataclass(frozen=True, slots=True)
class WireRequest:
    raw: bytes
    body: dict[str, Any]
    model: str
    messages: list[Message]
    stream: bool
    max_tokens: int | None
    tools: list[ToolSchema] | None
    session_hint: str | None = None
    passthrough: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int | None


class StreamWatch(Protocol):
    usage: Usage | None
    finished: bool
    failed: str | None

    def preamble(self, data: bytes) -> bool: ...
    def inspect(self, data: bytes) -> bool: ...
    def error_event(self, message: str) -> bytes: ...
