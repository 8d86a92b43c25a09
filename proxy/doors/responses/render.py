"""The compressor's view back as Responses `input` items (pure).

    a message whose chat fields still equal what its items say -> those items, untouched
    a changed message (pruned, arguments shortened, summary merged, calls dropped)
                                     -> rebuilt with its items as the template: reasoning and
                                        opaque items verbatim, text and arguments replaced,
                                        calls that are gone left out
    a message without items (the summary) -> a new message item

The instructions marker message renders to nothing: `instructions` stays in the body. The
compaction head renders to the items it holds (those before the newest compaction item, then
that item), as the client sent them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from compression import Message, content_text
from proxy.doors.responses.compaction_items import HEAD
from proxy.doors.responses.items import (
    Item,
    item_kind,
    opaque_placeholder,
    unchanged,
)
from proxy.doors.responses.parts import fresh_text, wire_content
from session.ports.door import ORIGINAL


def to_items(view: Sequence[Message], known: Iterable[Message] = ()) -> list[Any]:
    """Items for `view`; messages in `known` (the parsed request's own) are unchanged."""
    same = {id(message) for message in known}
    items: list[Any] = []
    for message in view:
        original = message.get(ORIGINAL)
        if isinstance(original, dict):
            items.extend(original.get(HEAD) or [])  # the instructions (a body field): none
            continue
        if not isinstance(original, list) or not original:
            items.extend(fresh_items(message))
        elif id(message) in same or unchanged(message, original):
            items.extend(original)
        else:
            items.extend(rebuilt(message, original))
    return items


def fresh_items(message: Message) -> list[Item]:
    """Items for a message ctxgate wrote itself (the summary)."""
    role = str(message.get("role") or "user")
    if role == "tool":
        output = wire_content(message.get("content"), "tool", None)
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": output,
            }
        ]
    items: list[Item] = []
    content = message.get("content")
    if content:
        items.append(
            {
                "type": "message",
                "role": role,
                "content": wire_content(content, role, []),
            }
        )
    for call in message.get("tool_calls") or []:
        function: dict[str, Any] = dict(call.get("function") or {})
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return items or [fresh_text(role, content_text(message))]


def rebuilt(message: Message, original: Sequence[Any]) -> list[Any]:
    lead = next((item for item in original if item_kind(item) != "opaque"), None)
    if lead is None:
        return _opaque_rebuilt(message, original)
    kind = item_kind(lead)
    if kind == "output":
        output = wire_content(message.get("content"), "tool", lead.get("output"))
        return [{**lead, "output": output} if item is lead else item for item in original]
    if kind == "message" and lead.get("role") != "assistant":
        content = wire_content(message.get("content"), lead.get("role"), lead.get("content"))
        return [{**lead, "content": content} if item is lead else item for item in original]
    return _turn_rebuilt(message, original)


def _opaque_rebuilt(message: Message, original: Sequence[Any]) -> list[Any]:
    """A summary merged into an opaque item's stand-in: the text goes before the item."""
    placeholder = opaque_placeholder(original[0].get("type") if original else None)
    text = content_text(message).removesuffix(placeholder).strip()
    role = str(message.get("role") or "user")
    return [fresh_text(role, text), *original] if text else list(original)


def _turn_rebuilt(message: Message, original: Sequence[Any]) -> list[Any]:
    calls = {call.get("id"): call for call in message.get("tool_calls") or []}
    content = message.get("content")
    text = _turn_text(content, original)
    out: list[Any] = []
    placed = False
    for item in original:
        kind = item_kind(item)
        if kind == "message":
            if not placed and text is not None:
                out.append(text)
            placed = True
        elif kind == "call":
            call = calls.pop(item.get("call_id"), None)
            if call is None:
                continue  # dropped with its output
            if not placed and text is not None:
                out.append(text)
                placed = True
            out.append(_call_rebuilt(item, call))
        else:
            out.append(item)
    if not placed and text is not None:
        out.append(text)
    for call in calls.values():  # calls the view added: none today, but keep them valid
        out.extend(fresh_items({"role": "assistant", "tool_calls": [call]}))
    return out


def _turn_text(content: Any, original: Sequence[Any]) -> Item | None:
    if not content:
        return None
    template = next(
        (item for item in original if item_kind(item) == "message"),
        {"type": "message", "role": "assistant", "content": []},
    )
    return {**template, "content": wire_content(content, "assistant", template.get("content"))}


def _call_rebuilt(item: Item, call: Any) -> Item:
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str):
        return item
    kind = item.get("type")
    if kind == "function_call" and item.get("arguments") != arguments:
        return {**item, "arguments": arguments}
    if kind == "custom_tool_call" and item.get("input") != arguments:
        return {**item, "input": arguments}
    return item  # other calls' arguments are the item itself: never rewritten
