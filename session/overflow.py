"""Recognising "the prompt does not fit" in upstream error answers, per provider dialect (pure).

Order matters: rate limits and request-validation errors that merely mention tokens are
excluded first, then explicit codes, then message patterns under a plausible status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Kind = Literal["prompt", "prompt_plus_output", "bytes"]


@dataclass(frozen=True, slots=True)
class Overflow:
    kind: Kind  # what must shrink: the messages, max_tokens, or the body's bytes
    window: int | None  # the context limit stated in the error, when it states one
    prompt_tokens: int | None  # the prompt size stated in the error, when it states one
    message: str


_RATE_LIMIT = re.compile(
    r"tokens per min|rate.?limit|\btpm\b|throttl|too many requests|quota", re.IGNORECASE
)
_NOT_OVERFLOW = re.compile(
    r"string_above_max_length|invalid 'user'|unsupported parameter|unsupported value|"
    r"is not supported with this model",
    re.IGNORECASE,
)
_OUTPUT_TOO_LARGE = re.compile(
    r"'max_tokens' or 'max_completion_tokens' is too large|"
    r"input length and `max_tokens` exceed context limit|"
    r"`inputs` tokens \+ `max_new_tokens` must be|"
    r"max_tokens.{0,40}(too large|exceed)",
    re.IGNORECASE,
)
_PATTERNS = re.compile(
    "|".join(
        [
            r"maximum context length",
            r"context length is",
            r"context window",
            r"context_length_exceeded",
            r"exceeds? the (available )?context size",
            r"prompt is too long",
            r"prompt too long",
            r"input is too long",
            r"too many (input )?tokens",
            r"exceeds the maximum number of tokens",
            r"longer than the (model's )?(maximum )?(context|model) length",
            r"maximum prompt length",
            r"reduce the length of the messages",
            r"`inputs` must have less than",
            r"`inputs` tokens \+ `max_new_tokens` must be",
            r"prompt token count of \d+ exceeds",
            r"exceeded model token limit",
            r"context window exceeds limit",
            r"greater than the context length",
            r"current length is \d+ while limit is",
            r"request too large",
            r"request_too_large",
            r"payload size exceeds",
            r"exceed context limit",
        ]
    ),
    re.IGNORECASE,
)
_WINDOW = [
    re.compile(r"maximum context length (?:is|of) (\d+)", re.IGNORECASE),
    re.compile(r"context size \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"tokens > (\d+) maximum", re.IGNORECASE),
    re.compile(r"must be <= (\d+)", re.IGNORECASE),
    re.compile(r"must have less than (\d+) tokens", re.IGNORECASE),
    re.compile(r"context length \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"maximum model length of (\d+)", re.IGNORECASE),
    re.compile(r"maximum prompt length is (\d+)", re.IGNORECASE),
    re.compile(r"while limit is (\d+)", re.IGNORECASE),
    re.compile(r"maximum number of tokens allowed \((\d+)\)", re.IGNORECASE),
    re.compile(r"exceed context limit: \d+ \+ \d+ > (\d+)", re.IGNORECASE),
    re.compile(r"exceed context window of (\d+)", re.IGNORECASE),  # llama-cpp-python, raw
]
_PROMPT = [
    re.compile(r"request \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"(\d+) in the messages", re.IGNORECASE),
    re.compile(r"resulted in (\d+) tokens", re.IGNORECASE),
    re.compile(r"has (\d+) input tokens", re.IGNORECASE),
    re.compile(r"prompt is too long: (\d+) tokens", re.IGNORECASE),
    re.compile(r"Given: (\d+) `inputs` tokens", re.IGNORECASE),
    re.compile(r"The input \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"exceed context limit: (\d+) \+", re.IGNORECASE),
    re.compile(r"input token count \((\d+)\)", re.IGNORECASE),  # Gemini
    re.compile(r"Requested tokens \((\d+)\) exceed", re.IGNORECASE),  # llama-cpp-python, raw
]


def _error_fields(body: bytes) -> tuple[str, str, str]:
    """(code, type, message) from any of the error shapes providers use (FastAPI's `detail`
    included: llama-cpp-python's server answers with it where its own mapping does not)."""
    try:
        data: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return "", "", body[:4000].decode("utf-8", "replace")
    if isinstance(data, list) and data:
        data = data[0]
    if data is None:
        return "", "", ""
    if not isinstance(data, dict):
        return "", "", str(data)[:4000]
    error = data.get("error", data.get("detail", data))
    if isinstance(error, str):
        return "", str(data.get("error_type", "")), error
    if not isinstance(error, dict):
        return "", "", str(error)
    message = str(error.get("message") or "")
    metadata = error.get("metadata")
    raw = metadata.get("raw") if isinstance(metadata, dict) else None
    if raw:
        message = f"{message} {raw}"
    return str(error.get("code") or ""), str(error.get("type") or ""), message


def _first_int(patterns: list[re.Pattern[str]], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def _stated(body: bytes, field: str) -> int | None:
    """A figure llama.cpp's server states as a field of its error (`n_ctx`,
    `n_prompt_tokens`), read only where the body names it."""
    if field.encode() not in body:
        return None
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    value = error.get(field) if isinstance(error, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def classify_overflow(status: int, body: bytes) -> Overflow | None:
    """An `Overflow` when the upstream's answer means the request is too large, else None."""
    if status < 400 or status == 429:
        return None
    code, type_, message = _error_fields(body)
    text = f"{code} {type_} {message}"
    if code == "rate_limit_exceeded" or _RATE_LIMIT.search(text) or _NOT_OVERFLOW.search(text):
        return None
    explicit = code in ("context_length_exceeded", "max_tokens_exceeded") or type_ in (
        "exceed_context_size_error",
        "request_too_large",
    )
    if not explicit and not (status in (400, 413, 422) or status >= 500):
        return None
    if not explicit and not _PATTERNS.search(text):
        if status == 413 and not message:
            return Overflow("bytes", None, None, "request too large (413, no body)")
        return None
    window = _stated(body, "n_ctx") or _first_int(_WINDOW, message)
    prompt = _stated(body, "n_prompt_tokens") or _first_int(_PROMPT, message)
    if type_ == "request_too_large" or (status == 413 and window is None):
        kind: Kind = "bytes"
    elif _OUTPUT_TOO_LARGE.search(message):
        kind = "prompt_plus_output"
    else:
        kind = "prompt"
    return Overflow(kind, window, prompt, message[:500])
