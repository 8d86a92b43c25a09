"""What Anthropic Messages answers say: usage, stream events, errors, summaries (pure).

The prompt figure is everything the provider processed: `input_tokens` +
`cache_creation_input_tokens` + `cache_read_input_tokens` (with caching, `input_tokens` alone
is only the uncached tail).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from compression import SummaryCall, SummaryCallError, SummaryReply
from proxy.doors.sse_data import json_object
from session.ports.door import Usage

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


def usage_of(usage: Any) -> Usage | None:
    """The prompt and output figures of a Messages `usage` object; None when it has none."""
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return None
    prompt = sum(
        value
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        if isinstance(value := usage.get(key), int)
    )
    output = usage.get("output_tokens")
    read, write = (
        value if isinstance(value := usage.get(key), int) else 0
        for key in ("cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return Usage(prompt, output if isinstance(output, int) else None, read, write)


def answer_usage(answer: bytes) -> Usage | None:
    data = json_object(answer)
    return usage_of(data.get("usage")) if data is not None else None


def event_type(data: bytes) -> str | None:
    """The `type` of an event's data, None for a comment or unreadable data."""
    if not data.lstrip().startswith(b"{"):
        return None
    parsed = json_object(data)
    kind = parsed.get("type") if parsed is not None else None
    return kind if isinstance(kind, str) else None


def is_preamble(data: bytes) -> bool:
    return event_type(data) in _PREAMBLE


def error_status(data: bytes) -> int | None:
    """The HTTP status an `error` event stands for; None for any other event."""
    if b'"error"' not in data:
        return None
    parsed = json_object(data)
    if parsed is None or parsed.get("type") != "error":
        return None
    error = parsed.get("error")
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
        kind = event_type(data)
        if kind == "message_start":
            parsed = json_object(data) or {}
            message = parsed.get("message")
            self.usage = usage_of(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta" and self.usage is not None:
            usage = (json_object(data) or {}).get("usage")
            output = usage.get("output_tokens") if isinstance(usage, dict) else None
            if isinstance(output, int):
                self.usage = replace(self.usage, completion_tokens=output)
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            self.failed = "upstream sent an error event"
            self.finished = True
        return True

    def error_event(self, message: str) -> bytes:
        return error_event(message)


def summary_body(call: SummaryCall, model: str) -> bytes:
    """A summary call over Messages: the system prompt apart, the rest as user/assistant turns."""
    system = [m.get("content") for m in call.messages if m.get("role") in ("system", "developer")]
    turns = [
        {"role": "assistant" if m.get("role") == "assistant" else "user", "content": m["content"]}
        for m in call.messages
        if m.get("role") not in ("system", "developer") and m.get("content")
    ]
    body: dict[str, Any] = {
        "model": call.model or model,
        "max_tokens": call.max_tokens,
        "messages": turns or [{"role": "user", "content": "(empty)"}],
        "temperature": 0,
    }
    texts = [text for text in system if isinstance(text, str) and text]
    if texts:
        body["system"] = "\n\n".join(texts)
    return orjson.dumps(body)


def summary_reply(answer: bytes) -> SummaryReply:
    data = json_object(answer)
    content = data.get("content") if data is not None else None
    if not isinstance(content, list):
        raise SummaryCallError("summary model sent an unreadable answer")
    text = "".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )
    usage = usage_of(data.get("usage")) if data is not None else None
    stop = data.get("stop_reason") if data is not None else None
    return SummaryReply(
        text=text,
        finish_reason="length" if stop == "max_tokens" else "stop",
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
    )
