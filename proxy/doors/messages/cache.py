"""Prompt-cache breakpoints on a rewritten Messages view, and the output reservation (pure).

The provider caches the prefix up to each `cache_control` block and allows at most four of
them. When ctxgate rewrites the history, the client's breakpoints stay where they are (moving
one turns every later turn into a cache write); what is left is spent at the end of the
rewritten prefix, so that prefix is written on the first turn after the compression and read
on the turns that follow. A client that sets none gets the system prompt plus the last three
non-system messages (`system_and_3`).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.doors.messages.wire_types import Block, CacheControl, System, Tool, WireMessage, kind

MAX_BREAKPOINTS = 4
MESSAGE_BREAKPOINTS = 3  # system_and_3: the last three non-system messages
EPHEMERAL: CacheControl = {"type": "ephemeral"}
# Blocks the API refuses a `cache_control` on.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def breakpoints(
    system: System | None, messages: list[WireMessage], tools: Sequence[Tool] | None
) -> int:
    """How many `cache_control` markers the request already carries."""
    count = sum(1 for tool in tools or [] if isinstance(tool, dict) and "cache_control" in tool)
    if isinstance(system, list):
        count += sum(1 for block in system if isinstance(block, dict) and "cache_control" in block)
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            count += sum(1 for block in content if "cache_control" in block)
    return count


def place_breakpoints(
    system: System | None,
    messages: list[WireMessage],
    tools: Sequence[Tool] | None,
    last_written: int | None,
) -> tuple[System | None, list[WireMessage]]:
    """(`system`, `messages`) with breakpoints added; the inputs are never mutated."""
    used = breakpoints(system, messages, tools)
    out = list(messages)
    if used == 0:
        return _system_and_3(system, out)
    if used >= MAX_BREAKPOINTS or last_written is None or _marked(out[last_written]):
        return system, out
    later = _next_marker(out, last_written)
    marked = _mark_message(out[last_written], later or EPHEMERAL)
    if marked is not None:
        out[last_written] = marked
    return system, out


def _system_and_3(
    system: System | None, messages: list[WireMessage]
) -> tuple[System | None, list[WireMessage]]:
    left = MAX_BREAKPOINTS
    if isinstance(system, str) and system:
        system = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        left -= 1
    elif isinstance(system, list) and system:
        marked = _mark_blocks(system, EPHEMERAL)
        if marked is not None:
            system, left = marked, left - 1
    wanted = min(left, MESSAGE_BREAKPOINTS)
    for index in range(len(messages) - 1, -1, -1):
        if wanted == 0:
            break
        if messages[index]["role"] == "system":
            continue
        marked_message = _mark_message(messages[index], EPHEMERAL)
        if marked_message is not None:
            messages[index] = marked_message
            wanted -= 1
    return system, messages


def _marked(message: WireMessage) -> bool:
    content = message["content"]
    return isinstance(content, list) and any("cache_control" in block for block in content)


def _next_marker(messages: list[WireMessage], after: int) -> CacheControl | None:
    """The client's first marker after a message: a new one copies its TTL (1h before 5m)."""
    for message in messages[after + 1 :]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            marker = block.get("cache_control")
            if isinstance(marker, dict):
                return marker
    return None


def _mark_message(message: WireMessage, marker: CacheControl) -> WireMessage | None:
    content = message["content"]
    if isinstance(content, str):
        if not content:
            return None
        blocks: list[Block] | None = [{"type": "text", "text": content, "cache_control": marker}]
    else:
        blocks = _mark_blocks(content, marker)
    if blocks is None:
        return None
    changed = message.copy()
    changed["content"] = blocks
    return changed


def _mark_blocks(blocks: list[Block], marker: CacheControl) -> list[Block] | None:
    """A copy with the last markable block marked; None when no block can carry a marker."""
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if isinstance(block, dict) and kind(block) not in _UNMARKABLE:
            out = list(blocks)
            out[index] = {**block, "cache_control": marker}
            return out
    return None
