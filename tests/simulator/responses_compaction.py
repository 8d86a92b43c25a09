"""Server-side compaction as the Responses API does it: a streamed ``/v1/responses`` whose last
input item is ``{"type": "compaction_trigger"}`` answers with one ``compaction`` item, and
``POST /v1/responses/compact`` answers ``{"object": "response.compaction", "output": [...]}``
(the user messages kept, then the compaction item). The item's ``encrypted_content`` is sealed
like reasoning, so an altered one is rejected and a genuine one counts its summary's tokens."""

from __future__ import annotations

import time
from typing import Any

from .responses_items import Seal, item_type, parts_text
from .responses_output import OutputIds

SUMMARY_LINES = 12  # the compaction summary keeps the last few lines of text of the history


def is_compaction_request(items: list[Any]) -> bool:
    return bool(items) and item_type(items[-1]) == "compaction_trigger"


def summary_of(items: list[Any]) -> str:
    """A deterministic summary: how much was compacted, then the last texts of the history."""
    texts: list[str] = []
    for item in items:
        kind = item_type(item)
        if kind == "message":
            texts.append(f"{item.get('role')}: {parts_text(item.get('content'))[:200]}")
        elif kind.endswith("_call_output"):
            texts.append(f"tool output: {parts_text(item.get('output'))[:200]}")
        elif kind.endswith("_call"):
            texts.append(f"call {item.get('name')}: {str(item.get('arguments', ''))[:200]}")
    head = f"Compacted {len(items)} items."
    return "\n".join([head, *texts[-SUMMARY_LINES:]])


def compaction_item(items: list[Any], ids: OutputIds, seal: Seal) -> dict[str, Any]:
    item_id = ids.next("cmp")
    return {
        "id": item_id,
        "type": "compaction",
        "encrypted_content": seal.close(item_id, "", summary_of(items)),
    }


def compact_answer(
    body: dict[str, Any], items: list[Any], ids: OutputIds, seal: Seal, usage: dict[str, Any]
) -> dict[str, Any]:
    """The ``/v1/responses/compact`` answer: the user messages kept, then one compaction item."""
    history = [i for i in items if item_type(i) != "compaction_trigger"]
    kept = [_message(i) for i in history if item_type(i) == "message" and i.get("role") == "user"]
    return {
        "id": ids.next("cmp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "model": body.get("model"),
        "output": [*kept, compaction_item(history, ids, seal)],
        "usage": usage,
    }


def _message(item: dict[str, Any]) -> dict[str, Any]:
    """A kept message in the API's full shape (type, and text as input_text parts)."""
    content = item.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {**item, "type": "message", "content": parts}
