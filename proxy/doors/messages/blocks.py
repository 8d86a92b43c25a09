"""Anthropic Messages `system` + `messages` to chat-shaped messages and back (pure).

    chat = to_chat(system, messages)        # what the compressor works on
    system, messages = to_wire(view)        # what goes upstream

Each chat message carries the wire content it came from under `ORIGINAL` (plain JSON, see
`wire_types.Original`):

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
from typing import TypedDict, cast

import orjson

from compression import ContentPart, FunctionCall, Message, ToolCall
from proxy.doors.messages.compaction_blocks import compaction_cut, compaction_head
from proxy.doors.messages.wire_types import (
    Block,
    ChatFields,
    CompactionOriginal,
    Original,
    System,
    Template,
    WireMessage,
    answers,
    call_id,
    carrying,
    chat_fields,
    content_of,
    input_of,
    kind,
    original,
    text_of,
    tool_use,
)

_THINKING = frozenset({"thinking", "redacted_thinking"})
REMOVED_CALL_TEXT = "(tool call removed)"
REMOVED_RESULT_TEXT = "(tool result removed)"
EMPTY_TEXT = "(empty)"


class _Piece(TypedDict):
    role: str
    blocks: list[Block]
    template: Template
    string: bool
    written: bool  # rebuilt or new: not the client's own bytes
    after: list[WireMessage]  # `role: system` entries that followed it
    before: list[WireMessage]  # messages that go before it as they are (a compaction's dead)


# -- wire to chat -------------------------------------------------------------------------------


def to_chat(
    system: System | None, messages: Sequence[WireMessage], *, compactions: bool = True
) -> list[Message]:
    """The chat-shaped conversation: the `system` field first, then every wire message (from
    the newest compaction turn on, unless `compactions` is False)."""
    out: list[Message] = []
    if system is not None and system != "" and system != []:
        head: Message = {"role": "system", "content": _system_content(system)}
        out.append(carrying(head, {"system": system}))
    cut = compaction_cut(messages) if compactions else None
    if cut is not None:
        compacted = compaction_head(messages, cut)
        turn: Message = {"role": "system", "content": compacted.text()}
        out.append(carrying(turn, {"compaction": compacted.original()}))
        if compacted.rest and compacted.results_template is not None:
            out.append(_carrying("user", compacted.results_template, compacted.rest, False))
        messages = messages[compacted.end :]
    for message in messages:
        if message["role"] == "system" and out and out[-1]["role"] != "system":
            # Among the turns (Claude Code puts reminders there): it travels with the message
            # before it, so it never separates a tool call from its result.
            before = original(out[-1])
            if before is not None:
                before.setdefault("after", []).append(message)
            continue
        out.extend(from_wire(message))
    return out


def _system_content(system: System) -> str | list[ContentPart]:
    if isinstance(system, str):
        return system
    return [_part(block, kind(block)) for block in system if isinstance(block, dict)]


def from_wire(message: WireMessage) -> list[Message]:
    """One wire message as chat-shaped messages (tool results each become their own)."""
    role = message["role"]
    content = message["content"]
    template: Template = {k: v for k, v in message.items() if k != "content"}
    string = isinstance(content, str)
    blocks: list[Block] = (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [b for b in content if isinstance(b, dict)]
    )
    if role != "user":
        return [_carrying(role, template, blocks, string)]
    results, rest = _results_first(blocks)
    out = [_carrying("user", template, [result], False) for result in results]
    if rest or not results:
        out.append(_carrying("user", template, rest, string))
    return out


def _results_first(blocks: list[Block]) -> tuple[list[Block], list[Block]]:
    """(the `tool_result` blocks, the others), each in order."""
    results: list[Block] = []
    rest: list[Block] = []
    for block in blocks:
        (results if kind(block) == "tool_result" else rest).append(block)
    return results, rest


def _carrying(role: str, template: Template, blocks: list[Block], string: bool) -> Message:
    kept: Original = {"role": role, "template": template, "blocks": blocks, "string": string}
    return carrying(_converted(kept), kept)


def _converted(kept: Original) -> Message:
    """The chat fields a wire piece stands for (deterministic: also the 'unchanged' test)."""
    role = kept["role"]
    blocks = kept["blocks"]
    if role == "user" and len(blocks) == 1 and kind(blocks[0]) == "tool_result":
        return _tool_message(blocks[0])
    if kept["string"] and len(blocks) == 1:
        return cast(Message, {"role": role, "content": blocks[0]["text"]})
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for block in blocks:
        block_kind = kind(block)
        if block_kind == "tool_use":
            calls.append(_call(block))
        elif block_kind not in _THINKING:
            parts.append(_part(block, block_kind))
    message = cast(Message, {"role": role, "content": parts or None})
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(result: Block) -> Message:
    return {
        "role": "tool",
        "tool_call_id": str(result.get("tool_use_id", "")),
        "content": _result_content(content_of(result)),
    }


def _part(block: Block, block_kind: str | None) -> ContentPart:
    if block_kind == "document":
        # Counted with the flat image figure, never by its base64 length.
        return cast(ContentPart, {"type": "image", "document": block})
    return cast(ContentPart, block)


def _result_content(content: str | list[Block] | None) -> str | list[ContentPart] | None:
    if content is None or isinstance(content, str):
        return content
    return [_part(b, kind(b)) for b in content if isinstance(b, dict)]


def _call(block: Block) -> ToolCall:
    call = tool_use(block)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": orjson.dumps(call.input).decode()},
    }


# -- chat to wire -------------------------------------------------------------------------------


def to_wire(view: Sequence[Message]) -> tuple[System | None, list[WireMessage]]:
    """(`system` field or None, `messages`) for a chat-shaped view."""
    rendered = render_view(view)
    return rendered.system, rendered.messages


@dataclass(frozen=True, slots=True)
class RenderedView:
    system: System | None  # the `system` field, None for none
    messages: list[WireMessage]
    last_written: int | None  # the last message holding content ctxgate wrote or changed


def render_view(view: Sequence[Message], dead: Sequence[WireMessage] = ()) -> RenderedView:
    """The wire `system` and messages of a view; `dead`: the messages before the compaction
    turn of the client's request, put back in front of that turn as they came."""
    system: System | None = None
    pieces: list[_Piece] = []
    for message in view:
        kept = original(message)
        if kept is not None and "compaction" in kept:
            pieces.extend(_compaction_pieces(kept["compaction"], list(dead)))
            continue
        chat = chat_fields(message)
        head = kept is None or "system" in kept
        if not pieces and head and chat.role in ("system", "developer"):
            system = _joined(system, _system_value(chat.content, kept))
            continue
        pieces.append(_piece(chat, kept))
    messages, written = _merged(pieces)
    return RenderedView(system, _repaired(messages), written)


def _system_value(content: str | list[ContentPart] | None, kept: Original | None) -> System:
    if kept is not None and content == _system_content(kept["system"]):
        return kept["system"]
    return content if isinstance(content, str) else _blocks_of(content)


def _joined(before: System | None, value: System) -> System:
    if before is None:
        return value
    as_blocks = [_text_block(before)] if isinstance(before, str) else list(before)
    return as_blocks + ([_text_block(value)] if isinstance(value, str) else list(value))


def _piece(chat: ChatFields, kept: Original | None) -> _Piece:
    if kept is not None and "blocks" in kept:
        if chat == chat_fields(_converted(kept)):
            return {
                "role": kept["role"],
                "blocks": list(kept["blocks"]),
                "template": kept["template"],
                "string": kept["string"],
                "written": False,
                "after": _after(kept),
                "before": [],
            }
        return _rebuilt(chat, kept)
    role = chat.role or "user"
    wire_role = "user" if role == "tool" else role
    fresh: Original = {
        "role": wire_role,
        "template": {"role": wire_role},
        "blocks": [],
        "string": False,
    }
    return _rebuilt(chat, fresh)


def _after(kept: Original) -> list[WireMessage]:
    return kept.get("after", [])


def _compaction_pieces(head: CompactionOriginal, dead: list[WireMessage]) -> list[_Piece]:
    """The compaction turn as the client sent it, with the results that answer its calls."""
    message = head["message"]
    content = message["content"]
    turn: _Piece = {
        "role": message["role"],
        "blocks": list(content) if isinstance(content, list) else [],
        "template": {k: v for k, v in message.items() if k != "content"},
        "string": False,
        "written": False,
        "after": [],
        "before": dead,
    }
    if not head["results"]:
        return [turn]
    results: _Piece = {
        "role": "user",
        "blocks": list(head["results"]),
        "template": head["results_template"] or {"role": "user"},
        "string": False,
        "written": False,
        "after": [],
        "before": [],
    }
    return [turn, results]


def _rebuilt(chat: ChatFields, kept: Original) -> _Piece:
    old = kept["blocks"]
    role = "user" if chat.role == "tool" else str(chat.role or "user")
    if chat.role == "tool":
        blocks = [_result_block(chat, old)]
    else:
        blocks = [b for b in old if kind(b) in _THINKING]
        blocks += _blocks_of(chat.content)
        blocks += _tool_uses(chat.tool_calls or [], old)
    string = isinstance(chat.content, str) and role != "assistant" and chat.role != "tool"
    return {
        "role": role,
        "blocks": blocks,
        "template": kept["template"] or {"role": role},
        "string": string and len(blocks) == 1,
        "written": True,
        "after": _after(kept),
        "before": [],
    }


def _result_block(chat: ChatFields, old: list[Block]) -> Block:
    template = next((b for b in old if kind(b) == "tool_result"), Block())
    result: Block = {**template, "type": "tool_result"}
    answered = chat.tool_call_id
    result["tool_use_id"] = answered if answered is not None else template.get("tool_use_id", "")
    content = chat.content
    result["content"] = content if isinstance(content, str) else _blocks_of(content)
    return result


def _text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def _blocks_of(content: str | Sequence[ContentPart] | None) -> list[Block]:
    if isinstance(content, str):
        return [_text_block(content)] if content else []
    blocks: list[Block] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        chat = cast(_ChatPart, part)
        part_kind = chat.get("type")
        if "document" in chat and part_kind == "image":
            blocks.append(chat["document"])
        elif part_kind == "text":
            if chat.get("text"):  # the API rejects empty text blocks
                blocks.append(cast(Block, dict(part)))
        else:
            blocks.append(cast(Block, part))
    return blocks


class _ChatPart(TypedDict, total=False):
    """A chat content part as the compressor hands it back: the door's own parts hold the
    block they stand for (`_part`)."""

    type: str
    text: str
    document: Block


def _tool_uses(calls: Sequence[ToolCall], old: list[Block]) -> list[Block]:
    by_id = {call_id(b): b for b in old if kind(b) == "tool_use"}
    out: list[Block] = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function: FunctionCall | dict[str, str] = call.get("function") or {}
        template = by_id.get(call.get("id"), Block())
        arguments = function.get("arguments")
        block: Block = {**template, "type": "tool_use", "id": call.get("id", "")}
        block["name"] = function.get("name", template.get("name", ""))
        if template and arguments == orjson.dumps(input_of(template)).decode():
            block["input"] = input_of(template)
        else:
            block["input"] = _input(arguments)
        out.append(block)
    return out


def _input(arguments: object) -> object:
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
        message["content"] = text_of(first["blocks"][0]) or ""
        return message
    blocks = [b for piece in run for b in piece["blocks"]] or [_text_block(EMPTY_TEXT)]
    if first["role"] == "user":
        results, rest = _results_first(blocks)
        blocks = results + rest
    message["content"] = blocks
    return message


def _repaired(messages: list[WireMessage]) -> list[WireMessage]:
    """Drop calls not answered by the next message and answers to no call of the previous one
    (`role: system` entries among the turns are no message in between)."""
    out = list(messages)
    turns = [i for i, m in enumerate(out) if m["role"] != "system"]
    for pos, index in enumerate(turns):
        message = out[index]
        blocks = message["content"]
        if not isinstance(blocks, list):
            continue
        if message["role"] == "assistant" and pos + 1 < len(turns):
            answered = _answered(out[turns[pos + 1]])
            kept = [b for b in blocks if kind(b) != "tool_use" or call_id(b) in answered]
            out[index] = _with_blocks(message, kept, REMOVED_CALL_TEXT)
        elif message["role"] == "user":
            asked = _asked(out[turns[pos - 1]]) if pos > 0 else set()
            kept = [b for b in blocks if kind(b) != "tool_result" or answers(b) in asked]
            out[index] = _with_blocks(message, kept, REMOVED_RESULT_TEXT)
    return out


def _asked(message: WireMessage) -> set[str | None]:
    """The ids of a message's calls."""
    blocks = message["content"]
    if not isinstance(blocks, list) or message["role"] not in ("user", "assistant"):
        return set()
    return {call_id(b) for b in blocks if kind(b) == "tool_use"}


def _answered(message: WireMessage) -> set[str | None]:
    """The ids of the calls a message's results answer."""
    blocks = message["content"]
    if not isinstance(blocks, list) or message["role"] not in ("user", "assistant"):
        return set()
    return {answers(b) for b in blocks if kind(b) == "tool_result"}


def _with_blocks(message: WireMessage, kept: list[Block], note: str) -> WireMessage:
    blocks = message["content"]
    if isinstance(blocks, list) and len(kept) == len(blocks):
        return message
    if not [b for b in kept if kind(b) not in _THINKING]:
        kept = [*kept, _text_block(note)]
    changed = message.copy()
    changed["content"] = kept
    return changed
