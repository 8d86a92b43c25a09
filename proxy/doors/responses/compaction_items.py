"""OpenAI Responses `compaction` items in an input (pure).

With server-side compaction (`context_management` on `/v1/responses`, or
`/v1/responses/compact`, which Codex uses), the provider emits `{"type": "compaction",
"encrypted_content": …}`: its summary of the history before it. OpenAI's compaction guide
says a client may drop the items before the newest compaction item; whether the API still
counts them when they are sent is not documented (research note frontdoor-gemini.md, section
5), so ctxgate takes the guide at its word. The input is split at the newest such item:

    dead      every item before it: forwarded as the client sent them, never counted, never
              read by the compressor
    head      the compaction item itself: one fixed-head message for the compressor (its
              content encrypted, so it is counted by a stand-in text), rendered back as the
              dead items and the item, in their places and unchanged; outputs after it that
              answer calls before it (and what lies between) join it, so that no output is
              ever parted from its call
    the rest  the conversation after it, compressible as usual

so the compaction item is never summarised or moved, and the size estimate counts only what
the provider reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

HEAD = "compaction"  # the key of the head message's original: the dead items and the item


def is_compaction(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "compaction"


def compaction_cut(items: Sequence[Any]) -> int | None:
    """Where the head ends (the index after the newest compaction item, or after the last
    output that answers a call before it), or None without a compaction item."""
    newest = next((i for i in range(len(items) - 1, -1, -1) if is_compaction(items[i])), None)
    if newest is None:
        return None
    end = newest + 1
    while True:
        # An output never leaves its call: one answering a call in the head joins the head.
        calls = {key for item in items[:end] if (key := _call_id(item, "_call")) is not None}
        answers = [i for i in range(end, len(items)) if _call_id(items[i], "_call_output") in calls]
        if not answers:
            return end
        end = answers[-1] + 1


def _call_id(item: Any, suffix: str) -> str | None:
    if not isinstance(item, dict) or not str(item.get("type", "")).endswith(suffix):
        return None
    value = item.get("call_id")
    return value if isinstance(value, str) else None


def head_text(head: Sequence[Any]) -> str:
    """What the compressor counts for the head: the newest compaction item by a short stand-in
    (its content is encrypted; only the provider reads it), then any items that joined it."""
    newest = max((i for i, item in enumerate(head) if is_compaction(item)), default=len(head))
    item = head[newest] if newest < len(head) else {}
    item_id = item.get("id")
    stand_in = f"[compaction item {item_id}]" if isinstance(item_id, str) else "[compaction item]"
    joined = [orjson.dumps(later).decode() for later in head[newest + 1 :]]
    return "\n".join([stand_in, *joined])
