"""What Gemini answers say: usage, stream chunks, errors, summaries (pure).

The prompt figure is `usageMetadata.promptTokenCount`, which already includes
`cachedContentTokenCount`; the output is `candidatesTokenCount` plus `thoughtsTokenCount`.
A stream is a `data:` line per chunk, each a whole `GenerateContentResponse`, with no `[DONE]`:
it is finished at a chunk with a `finishReason`, and a chunk `{"error": {...}}` is a failure.
"""

from __future__ import annotations

from typing import Any

import orjson

from compression import SummaryCall, SummaryCallError, SummaryReply
from proxy.doors.sse_data import json_object
from session.ports.door import Usage

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


def usage_of(metadata: Any) -> Usage | None:
    if not isinstance(metadata, dict) or not isinstance(metadata.get("promptTokenCount"), int):
        return None
    output = [
        value
        for key in ("candidatesTokenCount", "thoughtsTokenCount")
        if isinstance(value := metadata.get(key), int)
    ]
    prompt: int = metadata["promptTokenCount"]
    cached = metadata.get("cachedContentTokenCount")
    read = min(cached, prompt) if isinstance(cached, int) and cached > 0 else 0
    return Usage(prompt, sum(output) if output else None, cache_read=read)


def answer_usage(answer: bytes) -> Usage | None:
    data = json_object(answer)
    return usage_of(data.get("usageMetadata")) if data is not None else None


def error_status(data: bytes) -> int | None:
    """The HTTP status a chunk `{"error": {...}}` stands for; None for any other chunk."""
    if b'"error"' not in data:
        return None
    parsed = json_object(data)
    error = parsed.get("error") if parsed is not None else None
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    return code if isinstance(code, int) and 400 <= code < 600 else 500


def error_body(status: int, message: str) -> bytes:
    """Google's error envelope for a ctxgate-side error."""
    name = STATUS_NAMES.get(status) or ("INVALID_ARGUMENT" if status < 500 else "INTERNAL")
    return orjson.dumps({"error": {"code": status, "message": message, "status": name}})


def error_event(message: str, status: int = 500) -> bytes:
    """A chunk reporting a failure, which the SDKs raise as an API error."""
    return b"data: " + error_body(status, message) + b"\r\n\r\n"


def _finished(chunk: dict[str, Any]) -> bool:
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
        chunk = json_object(data)
        if chunk is None:
            return True
        if isinstance(chunk.get("error"), dict):
            self.failed = "upstream sent an error chunk"
            self.finished = True
            return True
        usage = usage_of(chunk.get("usageMetadata"))
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
    system = [m.get("content") for m in call.messages if m.get("role") in ("system", "developer")]
    contents = [
        {
            "role": "model" if m.get("role") == "assistant" else "user",
            "parts": [{"text": _text(m.get("content"))}],
        }
        for m in call.messages
        if m.get("role") not in ("system", "developer") and m.get("content")
    ]
    body: dict[str, Any] = {
        "contents": contents or [{"role": "user", "parts": [{"text": "(empty)"}]}],
        "generationConfig": {"maxOutputTokens": call.max_tokens, "temperature": 0},
    }
    texts = [text for text in system if isinstance(text, str) and text]
    if texts:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(texts)}]}
    return orjson.dumps(body)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def summary_reply(answer: bytes) -> SummaryReply:
    data = json_object(answer)
    candidates = data.get("candidates") if data is not None else None
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        raise SummaryCallError("summary model sent an unreadable answer")
    first = candidates[0]
    content = first.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    text = "".join(
        str(p.get("text", ""))
        for p in parts or []
        if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    )
    usage = usage_of(data.get("usageMetadata")) if data is not None else None
    return SummaryReply(
        text=text,
        finish_reason="length" if first.get("finishReason") == "MAX_TOKENS" else "stop",
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
    )
