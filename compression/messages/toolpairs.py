"""Pairing tool results with the calls they answer, and repairing broken pairs.

Ids are not unique in real transcripts (a later turn may reuse a call id), so a result is
paired by position AND id: it answers a pending call of the nearest assistant message with
`tool_calls` before it, and only while no other kind of message came in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compression.messages.content import has_text
from compression.messages.types import Message, ToolCall

REMOVED_CALL_TEXT = "(tool call removed)"
RESULT_ROLES = ("tool", "function")


@dataclass(frozen=True, slots=True)
class ToolPairing:
    owner: dict[int, tuple[int, int]]  # tool message index -> (assistant index, call position)
    answered: dict[int, frozenset[int]]  # assistant index -> positions of answered calls
    in_flight: int | None  # trailing assistant message whose calls may still be running


def tool_calls_of(message: Message) -> list[ToolCall]:
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def call_id(call: ToolCall) -> str | None:
    value = call.get("id") if isinstance(call, dict) else None
    return value if isinstance(value, str) and value else None


def call_parts(call: object) -> tuple[str | None, str | None]:
    """(function name, arguments string) of a tool call, None where absent or malformed."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return None, None
    name, arguments = function.get("name"), function.get("arguments")
    return (
        name if isinstance(name, str) else None,
        arguments if isinstance(arguments, str) else None,
    )


def is_result(message: Message) -> bool:
    return message.get("role") in RESULT_ROLES


def pair_tool_calls(messages: Sequence[Message]) -> ToolPairing:
    owner: dict[int, tuple[int, int]] = {}
    answered: dict[int, set[int]] = {}
    group: int | None = None
    pending: dict[str, list[int]] = {}
    last_caller: int | None = None
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            wanted = message.get("tool_call_id")
            positions = pending.get(wanted) if isinstance(wanted, str) else None
            if group is not None and positions:
                position = positions.pop(0)
                owner[index] = (group, position)
                answered[group].add(position)
            continue
        if role == "function":
            continue
        calls = tool_calls_of(message) if role == "assistant" else []
        group, pending = (index, _pending(calls)) if calls else (None, {})
        last_caller = index if calls else None
        if calls:
            answered[index] = set()
    return ToolPairing(
        owner=owner,
        answered={index: frozenset(found) for index, found in answered.items()},
        in_flight=last_caller,
    )


def _pending(calls: list[ToolCall]) -> dict[str, list[int]]:
    pending: dict[str, list[int]] = {}
    for position, call in enumerate(calls):
        identifier = call_id(call)
        if identifier is not None:
            pending.setdefault(identifier, []).append(position)
    return pending


def group_start(messages: Sequence[Message], pairing: ToolPairing, index: int) -> int:
    """Move a cut that lands on a tool result back to the assistant message that owns it."""
    while 0 < index < len(messages) and is_result(messages[index]):
        found = pairing.owner.get(index)
        index = found[0] if found is not None else index - 1
    return index


def group_end(messages: Sequence[Message], index: int) -> int:
    """Move a cut forward past tool results, so a region never starts with one."""
    while index < len(messages) and is_result(messages[index]):
        index += 1
    return index


def sanitize_tool_pairs(messages: Sequence[Message]) -> list[Message]:
    """Drop results whose call is gone and calls that were never answered.

    The trailing in-flight assistant message keeps its calls: their results are still coming.
    An assistant message left with neither calls nor text gets a short placeholder.
    """
    pairing = pair_tool_calls(messages)
    repaired: list[Message] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if index in pairing.owner:
                repaired.append(message)
            continue
        calls = tool_calls_of(message) if role == "assistant" else []
        kept = pairing.answered.get(index, frozenset())
        if not calls or index == pairing.in_flight or len(kept) == len(calls):
            repaired.append(message)
            continue
        repaired.append(_keep_calls(message, calls, kept))
    return repaired


def _keep_calls(message: Message, calls: list[ToolCall], kept: frozenset[int]) -> Message:
    changed = message.copy()
    if kept:
        changed["tool_calls"] = [call for position, call in enumerate(calls) if position in kept]
        return changed
    del changed["tool_calls"]
    if not has_text(changed):
        changed["content"] = REMOVED_CALL_TEXT
    return changed
