"""Anthropic's server-side compaction in the simulator (beta `compact-2026-01-12`).

A request whose `context_management.edits` holds a `compact_20260112` edit, and whose prompt
reaches the edit's trigger (`{"type": "input_tokens", "value": N}`, 150,000 when unset), is
answered with a `compaction` block first: `{"type": "compaction", "content": <summary>}`;
with `pause_after_compaction` that block is the whole answer (`stop_reason: "compaction"`).
A client sends the block back in its assistant turn, and from then on the API reads nothing
before the newest compaction block: those messages and blocks are neither counted nor cached
(`anthropic_prompt.prompt_of`). A block whose `content` is null records a failed compaction
and is a no-op; an empty `content` is refused.
"""

from __future__ import annotations

from typing import Any

COMPACT_EDIT = "compact_20260112"
DEFAULT_TRIGGER = 150_000


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def is_compaction(block: Any) -> bool:
    """A compaction block that closes a context (null content: a failed one, a no-op)."""
    return (
        isinstance(block, dict)
        and block.get("type") == "compaction"
        and isinstance(block.get("content"), str)
    )


def compaction_cut(messages: Any) -> tuple[int, int] | None:
    """(message index, block index) of the newest compaction block, or None."""
    if not isinstance(messages, list):
        return None
    for i in range(len(messages) - 1, -1, -1):
        blocks = _blocks(messages[i])
        for j in range(len(blocks) - 1, -1, -1):
            if is_compaction(blocks[j]):
                return i, j
    return None


def compact_edit(body: dict[str, Any]) -> dict[str, Any] | None:
    management = body.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    for edit in edits if isinstance(edits, list) else []:
        if isinstance(edit, dict) and edit.get("type") == COMPACT_EDIT:
            return edit
    return None


def trigger_of(edit: dict[str, Any]) -> int:
    trigger = edit.get("trigger")
    value = trigger.get("value") if isinstance(trigger, dict) else None
    return value if isinstance(value, int) and value > 0 else DEFAULT_TRIGGER


def compacts(body: dict[str, Any], prompt_tokens: int) -> dict[str, Any] | None:
    """The compact edit this request's prompt reaches, if any."""
    edit = compact_edit(body)
    if edit is None or prompt_tokens < trigger_of(edit):
        return None
    return edit


def summary_of(body: dict[str, Any]) -> str:
    """A deterministic summary of what the compaction closes: the users' words, shortened."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    said = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        texts = (
            [content]
            if isinstance(content, str)
            else [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
        )
        said.extend(t[:60] for t in texts if t)
    return f"<summary>Compacted {len(messages)} messages. The user asked: " + (
        " | ".join(said[-5:]) + "</summary>"
    )


def compaction_block(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "compaction", "content": summary_of(body)}


def compaction_problems(messages: Any) -> list[tuple[str, str]]:
    """Compaction blocks the API refuses: an empty `content` (null is a failed compaction)."""
    problems = []
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        for j, block in enumerate(_blocks(message)):
            if isinstance(block, dict) and block.get("type") == "compaction":
                if block.get("content") == "":
                    text = f"messages.{i}.content.{j}.content: Empty string content is not allowed"
                    problems.append(("empty_compaction", text))
    return problems
