"""A Messages API answer built from a ``Reply``: its content blocks (thinking signed, text,
tool_use), the non-streamed ``message`` object and the SSE event sequence of a streamed one."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .anthropic_cache import CacheUsage
from .anthropic_rules import ThinkingSigner
from .models import Reply
from .sse import split_text
from .tokens import count_text

TEXT_PIECE_CHARS = 40
JSON_PIECE_CHARS = 24
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}

Event = tuple[str, dict[str, Any]]  # (event name, data)


@dataclass(frozen=True, slots=True)
class Answer:
    message_id: str
    model: str
    content: list[dict[str, Any]]
    stop_reason: str
    usage: CacheUsage
    output_tokens: int

    def usage_dict(self) -> dict[str, Any]:
        return {**self.usage.as_dict(), "output_tokens": self.output_tokens}

    def wire_usage(self, output_tokens: int) -> dict[str, Any]:
        """Usage as the API sends it: the split by cache lifetime (all 5-minute here) too."""
        creation = self.usage.cache_creation_input_tokens
        return {
            **self.usage.as_dict(),
            "cache_creation": {
                "ephemeral_5m_input_tokens": creation,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


def thinking_mode(body: dict[str, Any]) -> str | None:
    """None (no thinking), "shown", or "omitted" (``display: omitted``: the block keeps its
    signature but not its text, as Claude Code asks)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return None
    return "omitted" if thinking.get("display") == "omitted" else "shown"


def _tool_use(call: dict[str, Any], next_id: Callable[[], str]) -> dict[str, Any]:
    nested = call.get("function")
    fn: dict[str, Any] = nested if isinstance(nested, dict) else call
    arguments = fn.get("arguments", fn.get("input", {}))
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    call_id = call.get("id") or next_id()
    return {"type": "tool_use", "id": call_id, "name": fn.get("name"), "input": arguments}


def _default_thinking(reply: Reply) -> str:
    if reply.tool_calls:
        return "The task needs a tool call; I will make it and read the result."
    return "I have what I need to answer."


def content_blocks(
    reply: Reply, *, thinking: str | None, signer: ThinkingSigner, next_id: Callable[[], str]
) -> list[dict[str, Any]]:
    """Thinking (when the request enables it), then text, then the tool calls."""
    blocks: list[dict[str, Any]] = []
    if thinking is not None:
        text = reply.reasoning_content or _default_thinking(reply)
        text = "" if thinking == "omitted" else text
        blocks.append({"type": "thinking", "thinking": text, "signature": signer.sign(text)})
    if reply.content or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.content or ""})
    blocks.extend(_tool_use(call, next_id) for call in reply.tool_calls or [])
    return blocks


def output_tokens_of(reply: Reply, blocks: list[dict[str, Any]]) -> int:
    if reply.completion_tokens is not None:
        return reply.completion_tokens
    total = 0
    for block in blocks:
        if block["type"] == "tool_use":
            total += count_text(block["name"] or "") + count_text(json.dumps(block["input"]))
        elif block["type"] == "compaction":
            total += count_text(block.get("content") or "")
        else:
            total += count_text(block.get("text") or block.get("thinking") or "")
    return max(total, 1)


def stop_reason_of(reply: Reply) -> str:
    if reply.finish_reason:
        return STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
    return "tool_use" if reply.tool_calls else "end_turn"


def message_object(answer: Answer) -> dict[str, Any]:
    return {
        "id": answer.message_id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": answer.content,
        "stop_reason": answer.stop_reason,
        "stop_sequence": None,
        "usage": answer.wire_usage(answer.output_tokens),
    }


def _block_events(index: int, block: dict[str, Any]) -> list[Event]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": piece}
            for piece in split_text(block["thinking"], TEXT_PIECE_CHARS)
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "compaction":
        # One delta carries the whole summary (the API does not stream it in pieces).
        start = {"type": "compaction", "content": None}
        deltas = [{"type": "compaction_delta", "content": block["content"]}]
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        arguments = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in split_text(arguments, JSON_PIECE_CHARS)
        ]
    else:
        start = {"type": "text", "text": ""}
        deltas = [
            {"type": "text_delta", "text": piece}
            for piece in split_text(block["text"], TEXT_PIECE_CHARS)
        ]
    opening = {"type": "content_block_start", "index": index, "content_block": start}
    events: list[Event] = [("content_block_start", opening)]
    events.extend(
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        for delta in deltas
    )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def start_event(answer: Answer) -> Event:
    message = {
        **message_object(answer),
        "content": [],
        "stop_reason": None,
        "usage": answer.wire_usage(1),
    }
    return "message_start", {"type": "message_start", "message": message}


def stream_events(answer: Answer) -> list[Event]:
    """message_start, ping, each block's start/deltas/stop, message_delta, message_stop."""
    events: list[Event] = [start_event(answer), ("ping", {"type": "ping"})]
    for index, block in enumerate(answer.content):
        events.extend(_block_events(index, block))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": answer.output_tokens},
    }
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode(event: Event) -> bytes:
    name, data = event
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode()
