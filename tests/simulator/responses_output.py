"""The Responses API's output: output items built from a ``Reply`` (reasoning, message,
function_call / custom_tool_call), the ``response`` object and its ``usage``, shaped like
api.openai.com's."""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .models import Reply
from .responses_items import Seal
from .tokens import count_text

OVERFLOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


@dataclass
class OutputIds:
    """Ids of responses and output items: a per-simulator random tag and a counter, so ids are
    unique across simulators and readable in logs."""

    tag: str = field(default_factory=lambda: secrets.token_hex(4))
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def next(self, prefix: str) -> str:
        return f"{prefix}_{self.tag}{next(self.counter):06d}"


def overflow_body() -> dict[str, Any]:
    """OpenAI's Responses overflow (a 400): no token figures in it."""
    return {
        "error": {
            "message": OVERFLOW_MESSAGE,
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }


def _is_custom(call: dict[str, Any]) -> bool:
    return call.get("type") in ("custom", "custom_tool_call") or "input" in call


def output_items(
    reply: Reply,
    ids: OutputIds,
    next_call_id: Callable[[], str],
    seal: Seal,
    encrypted: bool,
) -> list[dict[str, Any]]:
    """The completed output items of ``reply``: reasoning (when it has reasoning_content), the
    assistant message (when it has content), then one item per tool call."""
    items: list[dict[str, Any]] = []
    if reply.reasoning_content:
        item_id = ids.next("rs")
        summary = reply.reasoning_content
        items.append(
            {
                "id": item_id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": summary}],
                "encrypted_content": seal.close(item_id, summary, summary) if encrypted else None,
            }
        )
    if reply.content or not reply.tool_calls:
        items.append(
            {
                "id": ids.next("msg"),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": reply.content or "",
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            }
        )
    for call in reply.tool_calls or []:
        nested = call.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else call
        call_id = call.get("id") or call.get("call_id") or next_call_id()
        if _is_custom(call):
            items.append(
                {
                    "id": ids.next("ctc"),
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": fn.get("name", ""),
                    "input": str(call.get("input", "")),
                }
            )
            continue
        args = fn.get("arguments", "")
        items.append(
            {
                "id": ids.next("fc"),
                "type": "function_call",
                "status": "completed",
                "arguments": args if isinstance(args, str) else json.dumps(args),
                "call_id": call_id,
                "name": fn.get("name", ""),
            }
        )
    return items


def output_tokens(reply: Reply, items: list[dict[str, Any]]) -> tuple[int, int]:
    """(output tokens, reasoning tokens) of the output, unless the reply states them."""
    reasoning = sum(
        count_text(str(part.get("text", "")))
        for item in items
        if item["type"] == "reasoning"
        for part in item["summary"]
    )
    if reply.completion_tokens is not None:
        return reply.completion_tokens, min(reasoning, reply.completion_tokens)
    visible = 0
    for item in items:
        if item["type"] == "message":
            visible += sum(count_text(part["text"]) for part in item["content"])
        elif item["type"] == "function_call":
            visible += count_text(item["name"]) + count_text(item["arguments"])
        elif item["type"] == "custom_tool_call":
            visible += count_text(item["name"]) + count_text(item["input"])
    return visible + reasoning, reasoning


def usage_object(input_tokens: int, cached: int, output: int, reasoning: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output,
    }


def response_object(
    response_id: str, body: dict[str, Any], status: str = "in_progress"
) -> dict[str, Any]:
    """The ``response`` object echoing the request's settings, with no output yet."""
    given = body.get("reasoning")
    reasoning: dict[str, Any] = given if isinstance(given, dict) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": body.get("model"),
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": None,
        "service_tier": "default",
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": None,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def completed(
    response: dict[str, Any], items: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {**response, "status": "completed", "output": items, "usage": usage}


def failed(response: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    return {**response, "status": "failed", "error": {"code": code, "message": message}}


def output_text(items: list[dict[str, Any]]) -> str:
    return "".join(
        part["text"] for item in items if item["type"] == "message" for part in item["content"]
    )
