"""What Anthropic Messages answers say: usage, stream events, errors, summaries (pure).

The prompt figure is everything the provider processed: `input_tokens` +
`cache_creation_input_tokens` + `cache_read_input_tokens` (with caching, `input_tokens` alone
is only the uncached tail).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NotRequired, TypedDict

import orjson

from compression import ContentPart, SummaryCall, SummaryCallError, SummaryReply
from proxy.doors.messages.wire_types import Answer, AnswerUsage, answer_of, chat_fields, read_event
from proxy.doors.messages.wire_types import kind as kind_of
from session.ports.frontdoor import Usage

# The API's error types and the statuses it sends them with.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_STATUS_TYPE = {status: kind for kind, status in ERROR_STATUS.items()}
_PREAMBLE = frozenset({"message_start", "ping"})


def usage_of(answer: Answer | None) -> Usage | None:
    """The prompt and output figures of a Message's `usage`; None when it has none."""
    usage = answer.get("usage") if answer is not None else None
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return None
    read, write = (
        value if isinstance(value := usage.get(key), int) else 0
        for key in ("cache_read_input_tokens", "cache_creation_input_tokens")
    )
    prompt = usage["input_tokens"] + read + write
    return Usage(prompt, _output_tokens(usage), read, write)


def _output_tokens(usage: AnswerUsage | None) -> int | None:
    output = usage.get("output_tokens") if isinstance(usage, dict) else None
    return output if isinstance(output, int) else None


def answer_usage(answer: bytes) -> Usage | None:
    return usage_of(answer_of(answer))


def event_type(data: bytes) -> str | None:
    """The `type` of an event's data, None for a comment or unreadable data."""
    event = read_event(data)
    return event.type if event is not None else None


def is_preamble(data: bytes) -> bool:
    return event_type(data) in _PREAMBLE


def error_status(data: bytes) -> int | None:
    """The HTTP status an `error` event stands for; None for any other event."""
    if b'"error"' not in data:
        return None
    parsed = read_event(data)
    if parsed is None or parsed.type != "error":
        return None
    error = parsed.data.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return ERROR_STATUS.get(kind, 500) if isinstance(kind, str) else 500


def error_body(status: int, message: str) -> bytes:
    """The API's error envelope for a ctxgate-side error."""
    kind = _STATUS_TYPE.get(status) or ("invalid_request_error" if status < 500 else "api_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def error_event(message: str, status: int = 500) -> bytes:
    """A complete SSE `error` event, which the SDKs raise as an API error."""
    return b"event: error\ndata: " + error_body(status, message) + b"\n\n"


class MessagesWatch:
    """Usage from `message_start` (output from `message_delta`), the end at `message_stop`,
    a failure at `error`."""

    markers: tuple[bytes, ...] = (b"message_start", b"message_delta", b"message_stop", b"error")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finished = False
        self.failed: str | None = None

    def preamble(self, data: bytes) -> bool:
        return is_preamble(data)

    def inspect(self, data: bytes) -> bool:
        event = read_event(data)
        if event is None:
            return True
        if event.type == "message_start":
            self.usage = usage_of(event.message)
        elif event.type == "message_delta" and self.usage is not None:
            output = _output_tokens(event.usage)
            if output is not None:
                self.usage = replace(self.usage, completion_tokens=output)
        elif event.type == "message_stop":
            self.finished = True
        elif event.type == "error":
            self.failed = "upstream sent an error event"
            self.finished = True
        return True

    def error_event(self, message: str) -> bytes:
        return error_event(message)


def summary_body(call: SummaryCall, model: str) -> bytes:
    """A summary call over Messages: the system prompt apart, the rest as user/assistant turns."""
    system: list[str] = []
    turns: list[_Turn] = []
    for message in map(chat_fields, call.messages):
        role, content = message.role, message.content
        if role in ("system", "developer"):
            if isinstance(content, str) and content:
                system.append(content)
        elif content:
            turns.append(
                {"role": "assistant" if role == "assistant" else "user", "content": content}
            )
    body: _SummaryRequest = {
        "model": call.model or model,
        "max_tokens": call.max_tokens,
        "messages": turns or [{"role": "user", "content": "(empty)"}],
        "temperature": 0,
    }
    if system:
        body["system"] = "\n\n".join(system)
    return orjson.dumps(body)


class _Turn(TypedDict):
    role: str
    content: str | list[ContentPart]


class _SummaryRequest(TypedDict):
    model: str
    max_tokens: int
    messages: list[_Turn]
    temperature: int
    system: NotRequired[str]


def summary_reply(answer: bytes) -> SummaryReply:
    data = answer_of(answer)
    content = data.get("content") if data is not None else None
    if data is None or not isinstance(content, list):
        raise SummaryCallError("summary model sent an unreadable answer")
    text = "".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and kind_of(block) == "text"
    )
    usage = usage_of(data)
    return SummaryReply(
        text=text,
        finish_reason="length" if data.get("stop_reason") == "max_tokens" else "stop",
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
    )
