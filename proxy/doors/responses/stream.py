"""Watching a Responses event stream, and reading Responses errors (pure).

    response.created, response.in_progress   preamble: may be held back until the answer is
                                             known good (an overflow arrives after them)
    response.completed / response.incomplete the normal end; `response.usage` is the figure
    response.failed / error                  a failure; `context_length_exceeded` inside it
                                             is an overflow like the same error as a status

Events are told apart by their `type`, read from the front of the payload without parsing it
(OpenAI writes `type` first); only the events ctxgate acts on are parsed in full.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.doors.responses.wire_shapes import ErrorEvent
from proxy.doors.sse_data import count_at, text_at
from session.overflow import Overflow, classify_overflow
from session.ports.frontdoor import Usage

PREAMBLE = frozenset({"response.created", "response.in_progress"})
FINISHED = frozenset({"response.completed", "response.incomplete"})
FAILED = frozenset({"response.failed", "error"})
_LEADING_TYPE = re.compile(rb'\A\s*\{\s*"type"\s*:\s*"([^"\\]{1,100})"')
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')
_STATUS_OF_CODE = {
    "rate_limit_exceeded": 429,
    "server_error": 500,
    "internal_error": 500,
    "server_is_overloaded": 503,
    "slow_down": 503,
}


def event_type(data: bytes) -> str | None:
    """The event's `type`, or None for a comment or a payload that is not a typed object."""
    if not data:
        return None
    match = _LEADING_TYPE.match(data)
    if match is not None:
        return match.group(1).decode()
    parsed = _loads(data)
    return text_at(parsed, "type") if isinstance(parsed, dict) else None


def _loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def usage_of(response: object) -> Usage | None:
    """The `Usage` of a `Response` (its `input_tokens` include the cached tokens)."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = _count_at(usage, "input_tokens")
    if prompt is None:
        return None
    details = usage.get("input_tokens_details")
    cached = _count_at(details, "cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_count_at(usage, "output_tokens"),
        cache_read=min(cached, prompt) if cached is not None else 0,
    )


def _count_at(obj: Mapping[str, object], key: str) -> int | None:
    count = count_at(obj, key)
    return count if count is not None and count >= 0 else None


def failure_error(data: bytes | Mapping[str, object]) -> Mapping[str, object] | None:
    """The `ResponseError` of a `response.failed` or `error` event, else None."""
    parsed = _loads(data) if isinstance(data, bytes) else data
    if not isinstance(parsed, dict):
        return None
    kind = text_at(parsed, "type")
    if kind == "response.failed":
        response = parsed.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return error if isinstance(error, dict) else {"message": "response failed"}
    if kind == "error":
        inner = parsed.get("error")
        if isinstance(inner, dict):
            return inner
        return {key: parsed.get(key) for key in ("code", "message", "param")}
    return None


def error_status(error: Mapping[str, object]) -> int:
    """The HTTP status an in-stream error stands for."""
    code = error.get("code")
    if isinstance(code, int) and 400 <= code < 600:
        return code
    if isinstance(code, str):
        return _STATUS_OF_CODE.get(code, 400)
    return 400


def stream_error(data: bytes) -> int | None:
    if event_type(data) not in FAILED:
        return None
    error = failure_error(data)
    return error_status(error) if error is not None else None


def overflow(status: int, body: bytes) -> Overflow | None:
    """An overflow from a status answer or a failed-stream event payload."""
    if event_type(body) in FAILED:
        error = failure_error(body)
        if error is None:
            return None
        body = orjson.dumps({"error": error})
    return classify_overflow(status, body)


def error_event(message: str, sequence_number: int = 0) -> bytes:
    """A complete `error` event, as OpenAI sends when a stream fails."""
    event: ErrorEvent = {
        "type": "error",
        "code": "upstream_error",
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
    }
    return b"event: error\ndata: " + orjson.dumps(event) + b"\n\n"


class ResponsesWatch:
    """A `StreamWatch` for one upstream Responses stream."""

    markers: tuple[bytes, ...] = (
        b"response.completed",
        b"response.incomplete",
        b"response.failed",
        b'"error"',
    )

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finished = False
        self.failed: str | None = None
        self._sequence = -1

    def preamble(self, data: bytes) -> bool:
        return event_type(data) in PREAMBLE

    def inspect(self, data: bytes) -> bool:
        kind = event_type(data)
        if kind is None:
            return True
        found = _SEQUENCE.search(data) if kind not in FINISHED else None
        if found is not None:
            self._sequence = int(found.group(1))
        if kind in FINISHED:
            self.finished = True
            parsed = _loads(data)
            if isinstance(parsed, dict):
                self.usage = usage_of(parsed.get("response"))
                sequence = count_at(parsed, "sequence_number")
                self._sequence = sequence if sequence is not None else self._sequence
        elif kind in FAILED:
            self.finished = True
            error = failure_error(data) or {}
            # The code only: the provider's message may quote the request, and this is logged.
            self.failed = f"upstream {kind}: {error.get('code') or 'no code'}"
        return True

    def error_event(self, message: str) -> bytes:
        # Numbered after the last event the watch was shown: deltas pass by unread, so the
        # number may repeat one the client saw (no client orders events by it).
        return error_event(message, self._sequence + 1)
