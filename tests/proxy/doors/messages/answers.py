"""A streamed Messages API answer put together the way a client does: text, thinking, signature,
compaction and tool-input deltas into their blocks, the final stop reason and usage. An error
event reaching the client fails the test."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

APPENDED = {"text_delta": "text", "thinking_delta": "thinking"}
REPLACED = {"signature_delta": "signature", "compaction_delta": "content"}


def accumulate(lines: Iterable[str]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for line in lines:
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        kind = event["type"]
        if kind == "message_start":
            message = event["message"]
        elif kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            delta, block = event["delta"], blocks[event["index"]]
            field = APPENDED.get(delta["type"])
            if field is not None:
                block[field] = block.get(field, "") + delta[field]
            elif delta["type"] in REPLACED:
                block[REPLACED[delta["type"]]] = delta[REPLACED[delta["type"]]]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"].get("stop_reason")
            message["usage"] = {**message.get("usage", {}), **event.get("usage", {})}
        elif kind == "error":
            raise AssertionError(f"error event reached the client: {event}")
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    message["content"] = blocks
    return message
