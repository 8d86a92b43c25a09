"""What Gemini answers say: usage, stream chunks, errors, summaries (pure).

The prompt figure is `usageMetadata.promptTokenCount`, which already includes
`cachedContentTokenCount`; the output is `candidatesTokenCount` plus `thoughtsTokenCount`.
A stream is a `data:` line per chunk, each a whole `GenerateContentResponse`, with no `[DONE]`:
it is finished at a chunk with a `finishReason`, and a chunk `{"error": {...}}` is a failure.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

import orjson

from compression import ContentPart, SummaryCall, SummaryCallError, SummaryReply
from proxy.doors.gemini.contents import (
    Answer,
    ErrorDetail,
    WireContent,
    answer_of,
    chat_fields,
    first_candidate,
    is_thought,
    parts_in,
    text_of,
)
from session.ports.frontdoor import Usage

# Google's canonical status names for the HTTP statuses ctxgate answers with.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def usage_of(answer: Answer | None) -> Usage | None:
    """The figures of an answer's (or chunk's) `usageMetadata`; None when it has none."""
    metadata = answer.get("usageMetadata") if answer is not None else None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("promptTokenCount"), int):
        return None
    output = [
        value
        for key in ("candidatesTokenCount", "thoughtsTokenCount")
        if isinstance(value := metadata.get(key), int)
    ]
    prompt = metadata["promptTokenCount"]
    cached = metadata.get("cachedContentTokenCount")
    read = min(cached, prompt) if isinstance(cached, int) and cached > 0 else 0
    return Usage(prompt, sum(output) if output else None, cache_read=read)


def answer_usage(answer: bytes) -> Usage | None:
    return usage_of(answer_of(answer))


def error_status(data: bytes) -> int | None:
    """The HTTP status a chunk `{"error": {...}}` stands for; None for any other chunk."""
    if b'"error"' not in data:
        return None
    error = _error(answer_of(data))
    if error is None:
        return None
    code = error.get("code")
    return code if isinstance(code, int) and 400 <= code < 600 else 500


def _error(chunk: Answer | None) -> ErrorDetail | None:
    error = chunk.get("error") if chunk is not None else None
    return error if isinstance(error, dict) else None


def error_body(status: int, message: str) -> bytes:
    """Google's error envelope for a ctxgate-side error."""
    name = STATUS_NAMES.get(status) or ("INVALID_ARGUMENT" if status < 500 else "INTERNAL")
    return orjson.dumps({"error": {"code": status, "message": message, "status": name}})


def error_event(message: str, status: int = 500) -> bytes:
    """A chunk reporting a failure, which the SDKs raise as an API error."""
    return b"data: " + error_body(status, message) + b"\r\n\r\n"


def _finished(chunk: Answer) -> bool:
    candidates = chunk.get("candidates")
    if not isinstance(candidates, list):
        return False
    return any(isinstance(c, dict) and c.get("finishReason") for c in candidates)


class GeminiWatch:
    """Usage from each chunk's `usageMetadata` (the last wins), the end at a `finishReason`,
    a failure at an error chunk."""

    markers: tuple[bytes, ...] = (b'"usageMetadata"', b'"finishReason"', b'"error"')

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.finished = False
        self.failed: str | None = None

    def preamble(self, data: bytes) -> bool:
        return False

    def inspect(self, data: bytes) -> bool:
        chunk = answer_of(data)
        if chunk is None:
            return True
        if _error(chunk) is not None:
            self.failed = "upstream sent an error chunk"
            self.finished = True
            return True
        usage = usage_of(chunk)
        if usage is not None:
            self.usage = usage
        if _finished(chunk):
            self.finished = True
        return True

    def error_event(self, message: str) -> bytes:
        return error_event(message)


def summary_body(call: SummaryCall) -> bytes:
    """A summary call: the system prompt as `systemInstruction`, the rest as turns (the model
    is in the path)."""
    system: list[str] = []
    contents: list[WireContent] = []
    for message in map(chat_fields, call.messages):
        if message.role in ("system", "developer"):
            if isinstance(message.content, str) and message.content:
                system.append(message.content)
        elif message.content:
            role = "model" if message.role == "assistant" else "user"
            contents.append({"role": role, "parts": [{"text": _text(message.content)}]})
    body: _SummaryRequest = {
        "contents": contents or [{"role": "user", "parts": [{"text": "(empty)"}]}],
        "generationConfig": {"maxOutputTokens": call.max_tokens, "temperature": 0},
    }
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    return orjson.dumps(body)


class _SummaryConfig(TypedDict):
    maxOutputTokens: int
    temperature: int


class _SummaryRequest(TypedDict):
    contents: list[WireContent]
    generationConfig: _SummaryConfig
    systemInstruction: NotRequired[WireContent]


def _text(content: str | list[ContentPart]) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def summary_reply(answer: bytes) -> SummaryReply:
    data = answer_of(answer)
    first = first_candidate(data) if data is not None else None
    if data is None or first is None:
        raise SummaryCallError("summary model sent an unreadable answer")
    content = first.get("content")
    parts = parts_in(content) if isinstance(content, dict) else []
    text = "".join(
        text
        for p in parts
        if isinstance(p, dict) and (text := text_of(p)) is not None and not is_thought(p)
    )
    usage = usage_of(data)
    return SummaryReply(
        text=text,
        finish_reason="length" if first.get("finishReason") == "MAX_TOKENS" else "stop",
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
    )
