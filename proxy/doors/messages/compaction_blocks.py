"""Anthropic's compaction blocks in a Messages history (pure).

With server-side compaction (beta), an assistant turn may carry `{"type": "compaction",
"content": <summary>, …}`: the provider's summary of everything before it. The API reads
nothing before the newest such block, so the client's older messages (sent again or not) are
dead weight to the provider. ctxgate splits the history there:

    dead      every message before the compaction turn, and the blocks before the compaction
              block in that turn: forwarded as the client sent them, never counted, never read
              by the compressor (`dead_prefix`)
    head      the compaction turn itself, whole, with the `tool_result` blocks that answer its
              calls in the next message: one fixed-head message for the compressor, counted
              by what the provider reads, rendered back as the client's own blocks
    the rest  the conversation after it, compressible as usual

so the compaction block is never summarised and never leaves its turn, and the size estimate
counts only what the provider reads. A block whose `content` is null records a failed
compaction (a no-op for the API) and cuts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from proxy.doors.messages.wire_types import (
    Block,
    CompactionOriginal,
    Template,
    WireMessage,
    answers,
    call_id,
    content_of,
    kind,
    text_of,
    thinking_of,
    tool_use,
)


def blocks_of(message: WireMessage | None) -> list[Block]:
    content = message["content"] if message is not None else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def is_compaction(block: Block) -> bool:
    return kind(block) == "compaction" and isinstance(content_of(block), str)


def holds_compaction(message: WireMessage) -> bool:
    return any(is_compaction(b) for b in blocks_of(message))


def compaction_cut(messages: Sequence[WireMessage]) -> tuple[int, int] | None:
    """(message index, block index) of the newest compaction block, or None."""
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i]["content"]
        if not isinstance(content, list):
            continue
        for j in range(len(content) - 1, -1, -1):
            if is_compaction(content[j]):
                return i, j
    return None


def dead_prefix(messages: object) -> list[WireMessage]:
    """The messages before the newest compaction turn (what the provider does not read)."""
    if not isinstance(messages, list):
        return []
    cut = compaction_cut(messages)
    return [] if cut is None else messages[: cut[0]]


@dataclass(frozen=True, slots=True)
class Head:
    """The compaction turn and what travels with it."""

    message: WireMessage  # the compaction turn, as the client sent it
    start: int  # the compaction block's index in it (the blocks before it are dead)
    results: list[Block]  # the next message's `tool_result` blocks answering its calls
    results_template: Template | None  # that message without its content
    rest: list[Block]  # that message's other blocks (a normal message of the conversation)
    end: int  # the index of the first wire message after the head

    def original(self) -> CompactionOriginal:
        """Plain JSON for the head message's `ORIGINAL`."""
        return {
            "message": self.message,
            "results": self.results,
            "results_template": self.results_template,
            "end": self.end,
        }

    def text(self) -> str:
        """What the provider reads of the head, as text to count."""
        live = blocks_of(self.message)[self.start :] + self.results
        return "\n".join(filter(None, (block_text(b) for b in live)))


def compaction_head(messages: Sequence[WireMessage], cut: tuple[int, int]) -> Head:
    index, start = cut
    message = messages[index]
    calls = {call_id(b) for b in blocks_of(message) if kind(b) == "tool_use"}
    following = messages[index + 1] if index + 1 < len(messages) else None
    answered = [b for b in blocks_of(following) if kind(b) == "tool_result" and answers(b) in calls]
    if not calls or not answered or following is None:
        return Head(message, start, [], None, [], index + 1)
    template: Template = {k: v for k, v in following.items() if k != "content"}
    rest = [b for b in blocks_of(following) if not any(b is r for r in answered)]
    return Head(message, start, answered, template, rest, index + 2)


def block_text(block: Block) -> str:
    """A block's text as the provider reads it (a summary, a call's name and input, a
    result's content, thinking)."""
    block_kind = kind(block)
    if block_kind == "compaction" or block_kind == "tool_result":
        content = content_of(block)
        if block_kind == "tool_result" and isinstance(content, list):
            return "\n".join(block_text(b) for b in content if isinstance(b, dict))
        return str(content or "")
    if block_kind == "tool_use":
        call = tool_use(block)
        return f"{call.name} {orjson.dumps(call.input).decode()}"
    if block_kind == "thinking":
        return str(thinking_of(block) or "")
    if block_kind in ("image", "document"):
        return f"[{block_kind}]"  # its payload is not text
    text = text_of(block)
    if isinstance(text, str):
        return text
    return orjson.dumps(block).decode()
