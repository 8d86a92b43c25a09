"""Chat Completions streaming chunks, shaped like api.openai.com's (reliability.md §2.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .models import Reply
from .replies import completion_tokens_of, finish_reason_of, usage_object

CONTENT_PIECE_CHARS = 12
ARGUMENT_PIECE_CHARS = 10
DONE = b"data: [DONE]\n\n"


def split_text(text: str, size: int) -> list[str]:
    """Pieces of at most ``size`` characters, cut after whitespace when possible, so a
    non-trivial text always arrives in several deltas."""
    pieces: list[str] = []
    rest = text
    while rest:
        if len(rest) <= size:
            pieces.append(rest)
            break
        cut = rest.rfind(" ", 1, size + 1)
        cut = cut + 1 if cut > 0 else size
        pieces.append(rest[:cut])
        rest = rest[cut:]
    return pieces


def encode_event(payload: dict[str, Any]) -> bytes:
    return (
        b"data: "
        + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        + b"\n\n"
    )


def stream_chunks(
    *,
    completion_id: str,
    created: int,
    model: str,
    reply: Reply,
    tool_calls: list[dict[str, Any]],
    prompt_tokens: int,
    include_usage: bool,
) -> Iterator[dict[str, Any]]:
    """Every chunk object of the stream, in order (without the ``[DONE]`` sentinel).
    ``include_usage``: usage:null on every chunk plus a final ``choices: []`` usage chunk."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_simulator",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            obj["usage"] = None
        return obj

    content = reply.content
    if content or not tool_calls:
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        if reply.reasoning_content:
            for piece in split_text(reply.reasoning_content, CONTENT_PIECE_CHARS):
                yield chunk({"reasoning_content": piece})
        for piece in split_text(content or "", CONTENT_PIECE_CHARS):
            yield chunk({"content": piece})
        role_sent = True
    else:
        role_sent = False

    for index, call in enumerate(tool_calls):
        head: dict[str, Any] = {
            "tool_calls": [
                {
                    "index": index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""},
                }
            ]
        }
        if not role_sent:
            head = {"role": "assistant", "content": None, **head, "refusal": None}
            role_sent = True
        yield chunk(head)
        for piece in split_text(call["function"]["arguments"], ARGUMENT_PIECE_CHARS):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    yield chunk({}, finish_reason_of(reply, tool_calls))

    if include_usage:
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_simulator",
            "choices": [],
            "usage": usage_object(prompt_tokens, completion_tokens_of(reply, tool_calls)),
        }
