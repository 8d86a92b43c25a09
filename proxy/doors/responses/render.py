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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from compression import Message, ToolCall, content_text
from proxy.doors.responses.compaction_items import HEAD
from proxy.doors.responses.items import ARGUMENTS_FIELD, item_kind, opaque_placeholder, unchanged
from proxy.doors.responses.parts import fresh_text, wire_content
from proxy.doors.responses.wire_shapes import Item
from proxy.doors.sse_data import text_at
from session.ports.frontdoor import ORIGINAL


class _Said(NamedTuple):
    """What a view message says: its chat fields, read once."""

    role: str | None
    content: Any
    calls: list[ToolCall]
    call_id: Any  # a tool message's `tool_call_id`, as it came

    @classmethod
    def of(cls, message: Message) -> _Said:
        return cls(
            message.get("role"),
            message.get("content"),
            message.get("tool_calls") or [],
            message.get("tool_call_id"),
        )


class _Call(NamedTuple):
    """A chat tool call of a view message: its fields as they came (None where absent)."""

    id: Any
    name: Any
    arguments: Any

    @classmethod
    def of(cls, call: ToolCall) -> _Call:
        call_id, function = call.get("id"), call.get("function")
        if not isinstance(function, dict):
            return cls(call_id, None, None)
        return cls(call_id, function.get("name"), function.get("arguments"))

    def item(self) -> Item:
        """The call as a new `function_call` item."""
        return {
            "type": "function_call",
            "call_id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }


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
    said = _Said.of(message)
    role = str(said.role or "user")
    if role == "tool":
        output = wire_content(said.content, "tool", None)
        return [{"type": "function_call_output", "call_id": said.call_id, "output": output}]
    items: list[Item] = []
    if said.content:
        items.append(
            {"type": "message", "role": role, "content": wire_content(said.content, role, [])}
        )
    items.extend(_Call.of(call).item() for call in said.calls)
    return items or [fresh_text(role, content_text(message))]


def rebuilt(message: Message, original: Sequence[Any]) -> list[Any]:
    lead = next((item for item in original if item_kind(item) != "opaque"), None)
    if lead is None:
        return _opaque_rebuilt(message, original)
    kind = item_kind(lead)
    if kind == "output":
        output = wire_content(message.get("content"), "tool", lead.get("output"))
        return [{**lead, "output": output} if item is lead else item for item in original]
    if kind == "message" and lead["role"] != "assistant":
        content = wire_content(message.get("content"), lead["role"], lead.get("content"))
        return [{**lead, "content": content} if item is lead else item for item in original]
    return _turn_rebuilt(_Said.of(message), original)


def _opaque_rebuilt(message: Message, original: Sequence[Any]) -> list[Any]:
    """A summary merged into an opaque item's stand-in: the text goes before the item."""
    first = original[0] if original else None
    placeholder = opaque_placeholder(text_at(first, "type") if isinstance(first, dict) else None)
    text = content_text(message).removesuffix(placeholder).strip()
    role = str(_Said.of(message).role or "user")
    return [fresh_text(role, text), *original] if text else list(original)


def _turn_rebuilt(said: _Said, original: Sequence[Any]) -> list[Any]:
    calls = {call.id: call for call in map(_Call.of, said.calls)}
    text = _turn_text(said.content, original)
    out: list[Any] = []
    placed = False
    for item in original:
        kind = item_kind(item)
        if kind == "message":
            if not placed and text is not None:
                out.append(text)
            placed = True
        elif kind == "call":
            call = calls.pop(item["call_id"], None)
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
    out.extend(call.item() for call in calls.values())  # calls the view added: none today
    return out


def _turn_text(content: Any, original: Sequence[Any]) -> Mapping[str, object] | None:
    if not content:
        return None
    template = next(
        (item for item in original if item_kind(item) == "message"),
        {"type": "message", "role": "assistant", "content": []},
    )
    return {**template, "content": wire_content(content, "assistant", template.get("content"))}


def _call_rebuilt(item: Mapping[str, Any], call: _Call) -> Mapping[str, Any]:
    """The call item with the view's arguments, where the item keeps them as text (another
    call's arguments are the item itself: never rewritten)."""
    field = ARGUMENTS_FIELD.get(item["type"])
    if field is None or not isinstance(call.arguments, str) or item.get(field) == call.arguments:
        return item
    return {**item, field: call.arguments}
