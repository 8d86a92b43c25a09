"""Deterministic prune passes over old messages (no model call).

    duplicates   identical tool outputs (>= 200 chars): older copies become a short note
    one-liners   long tool results: one informative line from the originating call
    arguments    tool-call arguments over 500 chars: long string leaves shortened, still JSON
    images       image parts outside the newest few image-bearing messages: a placeholder

and, when nothing else is left to compress, `clip_outputs`: every long tool output shortened
in proportion to its size (its head and tail kept), or to its one-liner when too little of it
could stay.

Every pass is pure: it returns a new list and reuses each untouched message object.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compression.messages.content import (
    clip_middle,
    content_text,
    image_count,
    with_text,
    without_images,
)
from compression.messages.toolpairs import ToolPairing, call_parts, pair_tool_calls, tool_calls_of
from compression.messages.types import Message, ToolCall
from compression.options import CompressorOptions
from compression.pruning.oneliners import describe_result

DUPLICATE_NOTE = "[Duplicate tool output — same content as a later result]"
IMAGE_NOTE = "[image removed to save context]"
ARGUMENT_LEAF_CHARS = 200
CLIP_MIN_TOKENS = 64  # an output clipped shorter than this says less than its one-liner


@dataclass(frozen=True, slots=True)
class PruneResult:
    messages: list[Message]
    pruned: frozenset[int]  # indices whose content was shortened


def prune_messages(
    messages: Sequence[Message],
    start: int,
    end: int,
    options: CompressorOptions,
    *,
    one_liners: bool = True,
    pairing: ToolPairing | None = None,
) -> PruneResult:
    """Run the prune passes on `messages[start:end]`; messages outside are never touched."""
    pairing = pairing or pair_tool_calls(messages)
    out = list(messages)
    pruned: set[int] = set()
    newest_images = _newest_image_holders(messages, options.keep_images)
    duplicates = duplicate_indices(messages, options.duplicate_min_chars)
    for index in range(max(start, 0), min(end, len(messages))):
        message = messages[index]
        changed = _prune_one(message, index, messages, options, one_liners, pairing, duplicates)
        if index not in newest_images and message.get("role") != "user":
            changed = without_images(changed, IMAGE_NOTE)
        if changed is not message:
            out[index] = changed
            pruned.add(index)
    return PruneResult(out, frozenset(pruned))


def _prune_one(
    message: Message,
    index: int,
    messages: Sequence[Message],
    options: CompressorOptions,
    one_liners: bool,
    pairing: ToolPairing,
    duplicates: frozenset[int],
) -> Message:
    role = message.get("role")
    if role == "tool":
        if index in duplicates:
            return with_text(message, DUPLICATE_NOTE)
        text = content_text(message)
        if one_liners and len(text) > options.prune_min_chars:
            line = one_liner(messages, index, pairing)
            return with_text(message, line) if len(line) < len(text) else message
        return message
    if role == "assistant" and tool_calls_of(message):
        return shrink_call_arguments(message, options.tool_args_max_chars)
    return message


def clip_outputs(
    messages: Sequence[Message],
    tokens: Sequence[int],
    excess: int,
    options: CompressorOptions,
    pairing: ToolPairing,
) -> PruneResult:
    """Tool outputs shortened, each in proportion to its size, to remove `excess` tokens.

    Calls and results stay paired: only a result's content changes.
    """
    candidates = [
        index
        for index, message in enumerate(messages)
        if message.get("role") == "tool" and len(content_text(message)) > options.prune_min_chars
    ]
    total = sum(tokens[index] for index in candidates)
    out = list(messages)
    pruned: set[int] = set()
    if excess <= 0 or total <= 0:
        return PruneResult(out, frozenset())
    share = max(0.0, 1.0 - excess / total)
    for index in candidates:
        text = content_text(messages[index])
        if tokens[index] * share < CLIP_MIN_TOKENS:
            shorter = one_liner(messages, index, pairing)
        else:
            shorter = clip_middle(text, int(len(text) * share))
        if len(shorter) < len(text):
            out[index] = with_text(messages[index], shorter)
            pruned.add(index)
    return PruneResult(out, frozenset(pruned))


def duplicate_indices(messages: Sequence[Message], min_chars: int) -> frozenset[int]:
    """Tool results whose exact content appears again in a later tool result."""
    seen: set[str] = set()
    older: set[int] = set()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "tool":
            continue
        text = content_text(message)
        if len(text) < min_chars:
            continue
        if text in seen:
            older.add(index)
        else:
            seen.add(text)
    return frozenset(older)


def call_for_result(
    messages: Sequence[Message], index: int, pairing: ToolPairing
) -> ToolCall | None:
    found = pairing.owner.get(index)
    if found is None:
        return None
    owner, position = found
    return tool_calls_of(messages[owner])[position]


def one_liner(messages: Sequence[Message], index: int, pairing: ToolPairing) -> str:
    message = messages[index]
    name, arguments = call_parts(call_for_result(messages, index, pairing))
    fallback_name = message.get("name")
    label = name or (fallback_name if isinstance(fallback_name, str) else None) or "tool"
    return describe_result(label, arguments, content_text(message))


def shrink_call_arguments(message: Message, max_chars: int) -> Message:
    calls = tool_calls_of(message)
    shrunk: list[ToolCall] = []
    changed = False
    for call in calls:
        arguments = call_parts(call)[1]
        smaller = shrink_arguments(arguments, max_chars) if arguments is not None else None
        if smaller is None:
            shrunk.append(call)
            continue
        updated: Any = {**call["function"], "arguments": smaller}
        new_call = call.copy()
        new_call["function"] = updated
        shrunk.append(new_call)
        changed = True
    if not changed:
        return message
    copy = message.copy()
    copy["tool_calls"] = shrunk
    return copy


def shrink_arguments(arguments: str, max_chars: int) -> str | None:
    """Shortened arguments that are still valid JSON, or None to keep the original."""
    if len(arguments) <= max_chars:
        return None
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    text = json.dumps(_shrink_leaves(parsed), ensure_ascii=False)
    return text if len(text) < len(arguments) else None


def _shrink_leaves(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ARGUMENT_LEAF_CHARS:
        omitted = len(value) - ARGUMENT_LEAF_CHARS
        marker = (
            f"⟪ctxgate: {omitted:,} of {len(value):,} chars omitted from this old tool call; "
            "not part of the original — always write full content⟫"
        )
        return value[:ARGUMENT_LEAF_CHARS] + marker
    if isinstance(value, dict):
        return {key: _shrink_leaves(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shrink_leaves(item) for item in value]
    return value


def _newest_image_holders(messages: Sequence[Message], keep: int) -> frozenset[int]:
    holders: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        if len(holders) >= keep:
            break
        if image_count(messages[index]):
            holders.append(index)
    return frozenset(holders)
