"""Responses `input` items as the compressor's chat-shaped messages (pure).

Items are grouped so that what the provider requires to travel together is kept or dropped
together, then each group becomes one chat message carrying its items under `ORIGINAL`:

    message (user / developer / system)           -> that role ("system" as "developer":
                                                     a chat system message must come first)
    reasoning, assistant message, calls, and
    server-side tool items of one model turn      -> one assistant message with `tool_calls`
    *_call_output (by call_id)                    -> a tool message
    compaction, item_reference, unknown items     -> ride with the message before them
                                                     (alone, when nothing came before)

The newest `compaction` item cuts the input (`compaction.py`): it and every item before it are
one system-role message of the fixed head whose `ORIGINAL` is `{"compaction": [items]}`.

`instructions` stays a body field; it is counted through a leading system message whose
`ORIGINAL` is a marker (`{"body_field": "instructions"}`), so the compressor sees it as the
fixed head and rendering leaves it out of the items.

Calls: `function_call` (name, arguments), `custom_tool_call` (name, free-text `input`) and
every other `*_call` that has a `call_id` (`local_shell_call`, `computer_call`, …: the item
without its ids as JSON arguments). Outputs pair by `call_id` (else `id`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from compression import Message, ToolCall
from proxy.doors.responses.compaction_items import HEAD, compaction_cut, head_text
from proxy.doors.responses.parts import chat_content
from proxy.doors.sse_data import text_at
from session.ports.frontdoor import ORIGINAL, with_original

INSTRUCTIONS_MARK: dict[str, str] = {"body_field": "instructions"}
CHAT_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
_ITEM_ROLES = frozenset({"user", "assistant", "system", "developer"})
_CALL_ID_KEYS = frozenset({"type", "id", "call_id", "status"})
# Where a call item keeps its arguments (another call's arguments are the item itself).
ARGUMENTS_FIELD = {"function_call": "arguments", "custom_tool_call": "input"}


def item_kind(item: Any) -> str:
    """message | reasoning | call | output | turn (a server-side tool item) | opaque.

    The one reader of an item's `type`: a message has a `role` of `_ITEM_ROLES`, a call a
    string `call_id`, an output a key (`output_key`), so code given an item of that kind
    reads those as they are."""
    if not isinstance(item, dict):
        return "opaque"
    kind = item.get("type")
    if kind is None or kind == "message":
        return "message" if item.get("role") in _ITEM_ROLES else "opaque"
    if kind == "reasoning":
        return "reasoning"
    if not isinstance(kind, str):
        return "opaque"
    if kind.endswith("_call_output"):
        return "output" if output_key(item) is not None else "opaque"
    if kind.endswith("_call"):
        return "call" if isinstance(item.get("call_id"), str) else "turn"
    return "opaque"


def output_key(item: Mapping[str, object]) -> str | None:
    for key in ("call_id", "id"):
        value = item.get(key)
        if isinstance(value, str) and value:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Grouped:
    """Items grouped so far, and where the grouping stands, to go on from with more items."""

    groups: list[list[Any]]
    turn_open: bool = False  # the last group is an assistant turn still taking items
    pending: frozenset[Any] = frozenset()  # calls of that turn whose output has not come yet
    head: tuple[Any, ...] = ()  # the items up to the newest compaction item (compaction.py)


def grouped_from(items: Sequence[Any]) -> Grouped:
    """`items` grouped, cut at the newest compaction item (see the module doc)."""
    end = compaction_cut(items)
    if end is None:
        return regroup(Grouped([]), items)
    return regroup(Grouped([], head=tuple(items[:end])), items[end:])


def regroup(start: Grouped, items: Sequence[Any]) -> Grouped:
    """`start` with `items` added after its items, split into the groups described in the
    module doc; `start` itself is left as it was (its last group is copied before an item
    joins it)."""
    groups = list(start.groups)
    turn_open, pending = start.turn_open, set(start.pending)
    kept_last = start.groups[-1] if start.groups else None

    def join_last(item: Any) -> None:
        if groups[-1] is kept_last:
            groups[-1] = list(groups[-1])
        groups[-1].append(item)

    for item in items:
        kind = item_kind(item)
        if kind == "output":
            groups.append([item])
            pending.discard(output_key(item))
            turn_open = False
        elif kind == "message" and item["role"] != "assistant":
            groups.append([item])
            pending.clear()
            turn_open = False
        elif turn_open and kind != "opaque":
            join_last(item)
            if kind == "call":
                pending.add(item["call_id"])
        elif kind in ("reasoning", "turn", "opaque") and groups and (pending or kind == "opaque"):
            # Between the outputs of a turn's calls: a new assistant message here would cut
            # the outputs after it from their calls, so the item rides with the one before.
            join_last(item)
        elif kind == "opaque":
            groups.append([item])
        else:
            groups.append([item])
            pending = {item["call_id"]} if kind == "call" else set()
            turn_open = True
    return Grouped(groups, turn_open, frozenset(pending), start.head)


def group_message(items: Sequence[Any]) -> Message:
    """The chat message of one group (without the `ORIGINAL` key)."""
    lead = next((item for item in items if item_kind(item) != "opaque"), None)
    if lead is None:
        return _opaque_message(items[0])
    kind = item_kind(lead)
    if kind == "output":
        return {
            "role": "tool",
            "tool_call_id": output_key(lead) or "",
            "content": chat_content(lead.get("output")),
        }
    role = lead["role"] if kind == "message" else "assistant"
    if role != "assistant":
        role = "developer" if role == "system" else role
        return cast(Message, {"role": role, "content": chat_content(lead.get("content"))})
    return _turn_message(items)


def _opaque_message(item: Any) -> Message:
    role = text_at(item, "role") if isinstance(item, dict) else None
    kind = text_at(item, "type") if isinstance(item, dict) else None
    return cast(
        Message,
        {
            "role": role if role in ("user", "assistant") else "assistant",
            "content": opaque_placeholder(kind),
        },
    )


def opaque_placeholder(kind: Any) -> str:
    return f"[{kind if isinstance(kind, str) else 'opaque'} item]"


def _turn_message(items: Sequence[Any]) -> Message:
    texts = [
        chat_content(item.get("content"))
        for item in items
        if item_kind(item) == "message" and item["role"] == "assistant"
    ]
    calls = [to_tool_call(item) for item in items if item_kind(item) == "call"]
    message: Message = {"role": "assistant", "content": _joined(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _joined(texts: list[Any]) -> Any:
    if not texts:
        return None
    if len(texts) == 1:
        return texts[0]
    parts: list[Any] = []
    for text in texts:
        if isinstance(text, str):
            parts.append({"type": "text", "text": text})
        elif isinstance(text, list):
            parts.extend(text)
    return parts


def to_tool_call(item: Mapping[str, Any]) -> ToolCall:
    """The chat tool call of a call item (see `item_kind`)."""
    kind: str = item["type"]
    field = ARGUMENTS_FIELD.get(kind)
    name: str | None = kind
    if field is None:
        arguments: object = {k: v for k, v in item.items() if k not in _CALL_ID_KEYS}
    else:
        name, arguments = text_at(item, "name"), item.get(field)
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {
            "name": kind if name is None else name,
            "arguments": arguments
            if isinstance(arguments, str)
            else orjson.dumps(arguments).decode(),
        },
    }


def to_messages(items: Sequence[Any], instructions: str | None) -> list[Message]:
    """The conversation the compressor sees; every message carries its items."""
    return converted(grouped_from(items), instructions, None)


def converted(
    grouped: Grouped, instructions: str | None, before: tuple[Grouped, list[Message]] | None
) -> list[Message]:
    """The messages of `grouped`; with `before` (an earlier grouping it went on from, and its
    messages), the groups it left as they were keep their messages."""
    messages: list[Message] = []
    if instructions:
        head: Message = {"role": "system", "content": instructions}
        messages.append(with_original(head, dict(INSTRUCTIONS_MARK)))
    if grouped.head:
        compacted: Message = {"role": "system", "content": head_text(grouped.head)}
        messages.append(with_original(compacted, {HEAD: list(grouped.head)}))
    reused = 0
    if before is not None:
        earlier, earlier_messages = before
        offset = len(earlier_messages) - len(earlier.groups)
        while reused < len(earlier.groups) and grouped.groups[reused] is earlier.groups[reused]:
            reused += 1
        messages.extend(earlier_messages[offset : offset + reused])
    for group in grouped.groups[reused:]:
        message: dict[str, object] = {**group_message(group), ORIGINAL: list(group)}
        messages.append(cast(Message, message))
    return messages


def chat_fields(message: Message) -> tuple[Any, ...]:
    return tuple(message.get(key) for key in CHAT_FIELDS)


def unchanged(message: Message, items: Sequence[Any]) -> bool:
    """Whether the message still says what its original items say."""
    return chat_fields(message) == chat_fields(group_message(items))
