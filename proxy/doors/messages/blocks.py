"""Anthropic Messages `system` + `messages` to chat-shaped messages and back (pure).

    chat = to_chat(system, messages)        # what the compressor works on
    system, messages = to_wire(view)        # what goes upstream

Each chat message carries the wire content it came from under `ORIGINAL` (plain JSON):

    {"system": value}                                  the `system` field (string or blocks)
    {"role": r, "template": {...}, "blocks": [...], "string": bool}
                                                       blocks of one wire message

An assistant message becomes one chat message (text blocks as content, `tool_use` blocks as
`tool_calls`, thinking blocks only in the original); a user message becomes one `tool` message
per `tool_result` followed by a user message for its other blocks. A chat message whose chat
fields still equal what its original converts to is rendered as the original blocks; a changed
one is rebuilt with the original as template (thinking blocks always kept, first, byte for
byte); one without an original (the summary) is built fresh. Consecutive same-role output is
merged with `tool_result` blocks first, and any call left without its answer (or an answer
without its call) is removed, so the upstream always receives valid pairs.

A history with a compaction block is cut at the newest one (`compaction.py`): the messages
before its turn are no chat message at all (the door puts them back, as they came, in front
of the turn), and the turn is one system-role message of the fixed head:

    {"compaction": {"message": …, "results": […], "results_template": …, "end": n}}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import orjson

from compression import ContentPart, Message, ToolCall
from proxy.doors.messages.compaction_blocks import HEAD, compaction_cut, compaction_head
from session.ports.door import original_of, with_original

_THINKING = frozenset({"thinking", "redacted_thinking"})
_CHAT_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")
REMOVED_CALL_TEXT = "(tool call removed)"
REMOVED_RESULT_TEXT = "(tool result removed)"
EMPTY_TEXT = "(empty)"


class WireMessage(TypedDict, total=False):
    role: str
    content: str | list[dict[str, Any]]


class _Piece(TypedDict):
    role: str
    blocks: list[dict[str, Any]]
    template: dict[str, Any]
    string: bool
    written: bool  # rebuilt or new: not the client's own bytes
    after: list[WireMessage]  # `role: system` entries that followed it
    before: list[WireMessage]  # messages that go before it as they are (a compaction's dead)


# -- wire to chat -------------------------------------------------------------------------------


def to_chat(
    system: Any, messages: Sequence[WireMessage], *, compactions: bool = True
) -> list[Message]:
    """The chat-shaped conversation: the `system` field first, then every wire message (from
    the newest compaction turn on, unless `compactions` is False)."""
    out: list[Message] = []
    if system is not None and system != "" and system != []:
        head = cast(Message, {"role": "system", "content": _system_content(system)})
        out.append(with_original(head, {"system": system}))
    cut = compaction_cut(messages) if compactions else None
    if cut is not None:
        compacted = compaction_head(messages, cut)
        turn = cast(Message, {"role": "system", "content": compacted.text()})
        out.append(with_original(turn, compacted.original()))
        if compacted.rest and compacted.results_template is not None:
            out.append(_carrying("user", compacted.results_template, compacted.rest, False))
        messages = messages[compacted.end :]
    for message in messages:
        if message.get("role") == "system" and out and out[-1].get("role") != "system":
            # Among the turns (Claude Code puts reminders there): it travels with the message
            # before it, so it never separates a tool call from its result.
            after = cast(dict[str, Any], original_of(out[-1]))
            after.setdefault("after", []).append(message)
            continue
        out.extend(from_wire(message))
    return out


def _system_content(system: Any) -> str | list[ContentPart]:
    if isinstance(system, str):
        return system
    return [_part(block) for block in system if isinstance(block, dict)]


def from_wire(message: WireMessage) -> list[Message]:
    """One wire message as chat-shaped messages (tool results each become their own)."""
    role = message.get("role", "user")
    content = message.get("content")
    template = {k: v for k, v in message.items() if k != "content"}
    string = isinstance(content, str)
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [b for b in content or [] if isinstance(b, dict)]
    )
    if role != "user":
        return [_carrying(role, template, blocks, string)]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    rest = [b for b in blocks if b.get("type") != "tool_result"]
    out = [_carrying("user", template, [result], False) for result in results]
    if rest or not results:
        out.append(_carrying("user", template, rest, string))
    return out


def _carrying(
    role: str, template: dict[str, Any], blocks: list[dict[str, Any]], string: bool
) -> Message:
    original = {"role": role, "template": template, "blocks": blocks, "string": string}
    return with_original(_converted(original), original)


def _converted(original: dict[str, Any]) -> Message:
    """The chat fields a wire piece stands for (deterministic: also the 'unchanged' test)."""
    role: str = original["role"]
    blocks: list[dict[str, Any]] = original["blocks"]
    if role == "user" and len(blocks) == 1 and blocks[0].get("type") == "tool_result":
        result = blocks[0]
        return cast(
            Message,
            {
                "role": "tool",
                "tool_call_id": str(result.get("tool_use_id", "")),
                "content": _result_content(result.get("content")),
            },
        )
    if original["string"] and len(blocks) == 1:
        return cast(Message, {"role": role, "content": blocks[0].get("text", "")})
    parts = [
        _part(b) for b in blocks if b.get("type") not in _THINKING and b.get("type") != "tool_use"
    ]
    message = cast(Message, {"role": role, "content": parts or None})
    calls = [_call(b) for b in blocks if b.get("type") == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return message


def _part(block: dict[str, Any]) -> ContentPart:
    if block.get("type") == "document":
        # Counted with the flat image figure, never by its base64 length.
        return cast(ContentPart, {"type": "image", "document": block})
    return cast(ContentPart, block)


def _result_content(content: Any) -> str | list[ContentPart] | None:
    if content is None or isinstance(content, str):
        return content
    return [_part(b) for b in content if isinstance(b, dict)]


def _call(block: dict[str, Any]) -> ToolCall:
    arguments = orjson.dumps(block.get("input", {})).decode()
    return {
        "id": str(block.get("id", "")),
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": arguments},
    }


# -- chat to wire -------------------------------------------------------------------------------


def to_wire(view: Sequence[Message]) -> tuple[Any, list[WireMessage]]:
    """(`system` field or None, `messages`) for a chat-shaped view."""
    rendered = render_view(view)
    return rendered.system, rendered.messages


@dataclass(frozen=True, slots=True)
class RenderedView:
    system: Any  # the `system` field, None for none
    messages: list[WireMessage]
    last_written: int | None  # the last message holding content ctxgate wrote or changed


def render_view(view: Sequence[Message], dead: Sequence[WireMessage] = ()) -> RenderedView:
    """The wire `system` and messages of a view; `dead`: the messages before the compaction
    turn of the client's request, put back in front of that turn as they came."""
    system: Any = None
    pieces: list[_Piece] = []
    for message in view:
        original = original_of(message)
        if original is not None and HEAD in original:
            pieces.extend(_compaction_pieces(original[HEAD], list(dead)))
            continue
        head = original is None or "system" in original
        if not pieces and head and message.get("role") in ("system", "developer"):
            system = _joined(system, _system_value(message, original))
            continue
        pieces.append(_piece(message, original))
    messages, written = _merged(pieces)
    return RenderedView(system, _repaired(messages), written)


def _system_value(message: Message, original: dict[str, Any] | None) -> Any:
    content = message.get("content")
    if original is not None and content == _system_content(original["system"]):
        return original["system"]
    return content if isinstance(content, str) else _blocks_of(content)


def _joined(before: Any, value: Any) -> Any:
    if before is None:
        return value
    as_blocks = [_text_block(before)] if isinstance(before, str) else list(before)
    return as_blocks + ([_text_block(value)] if isinstance(value, str) else list(value))


def _piece(message: Message, original: dict[str, Any] | None) -> _Piece:
    if original is not None and "blocks" in original:
        if _fields(message) == _fields(_converted(original)):
            return {
                "role": original["role"],
                "blocks": list(original["blocks"]),
                "template": original["template"],
                "string": original["string"],
                "written": False,
                "after": original.get("after", []),
                "before": [],
            }
        return _rebuilt(message, original)
    role = message.get("role") or "user"
    wire_role = "user" if role == "tool" else role
    fresh: dict[str, Any] = {"role": wire_role, "template": {"role": wire_role}}
    return _rebuilt(message, fresh | {"string": False})


def _compaction_pieces(head: dict[str, Any], dead: list[WireMessage]) -> list[_Piece]:
    """The compaction turn as the client sent it, with the results that answer its calls."""
    message: dict[str, Any] = head["message"]
    content = message.get("content")
    turn: _Piece = {
        "role": str(message.get("role", "assistant")),
        "blocks": list(content) if isinstance(content, list) else [],
        "template": {k: v for k, v in message.items() if k != "content"},
        "string": False,
        "written": False,
        "after": [],
        "before": dead,
    }
    if not head.get("results"):
        return [turn]
    results: _Piece = {
        "role": "user",
        "blocks": list(head["results"]),
        "template": head.get("results_template") or {"role": "user"},
        "string": False,
        "written": False,
        "after": [],
        "before": [],
    }
    return [turn, results]


def _fields(message: Message) -> list[Any]:
    fields = cast(dict[str, Any], message)
    return [fields.get(name) for name in _CHAT_FIELDS]


def _rebuilt(message: Message, original: dict[str, Any]) -> _Piece:
    old: list[dict[str, Any]] = original.get("blocks", [])
    role = "user" if message.get("role") == "tool" else str(message.get("role") or "user")
    content = message.get("content")
    if message.get("role") == "tool":
        template = next((b for b in old if b.get("type") == "tool_result"), {})
        result = {**template, "type": "tool_result"}
        result["tool_use_id"] = message.get("tool_call_id", template.get("tool_use_id", ""))
        result["content"] = content if isinstance(content, str) else _blocks_of(content)
        blocks = [result]
    else:
        blocks = [b for b in old if b.get("type") in _THINKING]
        blocks += _blocks_of(content)
        blocks += _tool_uses(message.get("tool_calls") or [], old)
    string = isinstance(content, str) and role != "assistant" and message.get("role") != "tool"
    return {
        "role": role,
        "blocks": blocks,
        "template": original.get("template") or {"role": role},
        "string": string and len(blocks) == 1,
        "written": True,
        "after": original.get("after", []),
        "before": [],
    }


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _blocks_of(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text_block(content)] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if "document" in part and part.get("type") == "image":
            blocks.append(part["document"])
        elif part.get("type") == "text":
            if part.get("text"):  # the API rejects empty text blocks
                blocks.append(dict(part))
        else:
            blocks.append(part)
    return blocks


def _tool_uses(calls: Sequence[Any], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {b.get("id"): b for b in old if b.get("type") == "tool_use"}
    out: list[dict[str, Any]] = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        template = by_id.get(call.get("id"), {})
        arguments = function.get("arguments")
        block = {**template, "type": "tool_use", "id": call.get("id", "")}
        block["name"] = function.get("name", template.get("name", ""))
        if template and arguments == orjson.dumps(template.get("input", {})).decode():
            block["input"] = template.get("input", {})
        else:
            block["input"] = _input(arguments)
        out.append(block)
    return out


def _input(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments if isinstance(arguments, dict) else {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _merged(pieces: list[_Piece]) -> tuple[list[WireMessage], int | None]:
    """One wire message per run of same-role pieces, `tool_result` blocks first; and the
    index of the last one holding written content."""
    out: list[WireMessage] = []
    written = None
    for run in _runs(pieces):
        out.extend(run[0]["before"])
        out.append(_message(run))
        if any(piece["written"] for piece in run):
            written = len(out) - 1
        out.extend(run[-1]["after"])
    return out, written


def _runs(pieces: list[_Piece]) -> list[list[_Piece]]:
    runs: list[list[_Piece]] = []
    for piece in pieces:
        last = runs[-1][-1] if runs else None
        joins = last is not None and piece["role"] == last["role"] and not last["after"]
        if joins and not piece["before"]:
            runs[-1].append(piece)
        else:
            runs.append([piece])
    return runs


def _message(run: list[_Piece]) -> WireMessage:
    first = run[0]
    message = cast(WireMessage, dict(first["template"]))
    if len(run) == 1 and first["string"]:
        message["content"] = first["blocks"][0].get("text", "")
        return message
    blocks = [b for piece in run for b in piece["blocks"]] or [_text_block(EMPTY_TEXT)]
    if first["role"] == "user":
        blocks = [b for b in blocks if b.get("type") == "tool_result"] + [
            b for b in blocks if b.get("type") != "tool_result"
        ]
    message["content"] = blocks
    return message


def _repaired(messages: list[WireMessage]) -> list[WireMessage]:
    """Drop calls not answered by the next message and answers to no call of the previous one
    (`role: system` entries among the turns are no message in between)."""
    out = list(messages)
    turns = [i for i, m in enumerate(out) if m.get("role") != "system"]
    for pos, index in enumerate(turns):
        message = out[index]
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        if message.get("role") == "assistant" and pos + 1 < len(turns):
            answered = _ids(out[turns[pos + 1]], "tool_result", "tool_use_id")
            kept = [b for b in blocks if b.get("type") != "tool_use" or b.get("id") in answered]
            out[index] = _with_blocks(message, kept, REMOVED_CALL_TEXT)
        elif message.get("role") == "user":
            asked = _ids(out[turns[pos - 1]], "tool_use", "id") if pos > 0 else set()
            kept = [
                b for b in blocks if b.get("type") != "tool_result" or b.get("tool_use_id") in asked
            ]
            out[index] = _with_blocks(message, kept, REMOVED_RESULT_TEXT)
    return out


def _ids(message: WireMessage, kind: str, key: str) -> set[Any]:
    blocks = message.get("content")
    if not isinstance(blocks, list) or message.get("role") not in ("user", "assistant"):
        return set()
    return {b.get(key) for b in blocks if b.get("type") == kind}


def _with_blocks(message: WireMessage, kept: list[dict[str, Any]], note: str) -> WireMessage:
    blocks = message.get("content")
    if isinstance(blocks, list) and len(kept) == len(blocks):
        return message
    if not [b for b in kept if b.get("type") not in _THINKING]:
        kept = [*kept, _text_block(note)]
    changed = cast(WireMessage, dict(message))
    changed["content"] = kept
    return changed
