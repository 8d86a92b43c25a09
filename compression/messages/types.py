"""Wire shapes of the OpenAI Chat Completions messages the compressor works on.

These are TypedDicts: at run time messages stay the plain dicts the client sent, so fields
ctxgate does not know about are carried through untouched.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCall(TypedDict, total=False):
    id: str
    type: str
    function: FunctionCall


class ContentPart(TypedDict, total=False):
    type: str
    text: str
    image_url: dict[str, Any]


class Message(TypedDict, total=False):
    role: Role
    content: str | list[ContentPart] | None
    name: str
    tool_calls: list[ToolCall]
    tool_call_id: str


class ToolSchema(TypedDict, total=False):
    type: str
    function: dict[str, Any]
