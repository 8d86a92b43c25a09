"""Gemini `systemInstruction` + `contents` to chat-shaped messages and back (pure).

    chat = to_chat(system, contents)       # what the compressor works on
    system, contents = render_view(view)   # what goes upstream

Each chat message carries the wire content it came from under `ORIGINAL` (plain JSON, see
`contents.Original`):

    {"system": value}                                   the `systemInstruction` field
    {"role": r, "template": {...}, "parts": [...], "at": [...], "group": g, "ids": [...]}
                                                        parts of the wire content number `g`

A `model` content becomes one assistant message (text parts as content, `functionCall` parts
as `tool_calls`, thought parts only in the original); a `user` content becomes one `tool`
message per `functionResponse` part, then a user message for its other parts. `at` holds each
part's position in its content, so the pieces of one content go back together in the order
they came. A call without an `id` gets one from its position (`POSITIONAL` + content + index),
and a response without one takes the id of the call at its position in the model content
before it; positional ids never go upstream.

A chat message whose fields still equal what its original converts to goes back as the
original parts. A changed assistant message is rebuilt around the original: thought parts
always kept first, byte for byte; every text part and call the compressor left as it was kept
as it came, thought signature included; a call whose name or arguments changed carries the
documented dummy signature in place of its own (an altered signed part is refused).
The pieces then go back into contents with every call paired (`pairs.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, cast

import orjson

from compression import ContentPart, Message, ToolCall
from proxy.doors.gemini.contents import (
    ChatCall,
    ChatFields,
    FunctionCall,
    FunctionResponse,
    Original,
    Part,
    System,
    Template,
    WireContent,
    call_of,
    carrying,
    chat_call,
    chat_fields,
    given_id,
    is_answer,
    is_call,
    is_model,
    is_thought,
    original,
    parts_in,
    response_of,
    text_of,
)
from proxy.doors.gemini.pairs import DUMMY_SIGNATURE, SIGNATURE, Piece, merged, repaired

POSITIONAL = "gemini-pos-"  # ids ctxgate gave calls that had none; never sent upstream
# The one string a tool's `response` object holds, under the keys Gemini CLI and the SDKs use.
_RESPONSE_KEYS = ("output", "error", "content", "result")

# -- wire to chat -------------------------------------------------------------------------------


def to_chat(
    system: System | None, contents: Sequence[WireContent], start: int = 0
) -> list[Message]:
    """The chat-shaped conversation: `systemInstruction` first, then every content (numbered
    from `start`)."""
    out: list[Message] = []
    if isinstance(system, (dict, str)) and system_text(system):
        head: Message = {"role": "system", "content": system_text(system)}
        out.append(carrying(head, {"system": system}))
    calls: list[str] = []  # the ids of the last model content's calls
    for index, content in enumerate(contents, start):
        if not isinstance(content, dict):
            continue
        messages, ids = from_wire(content, index, calls)
        if is_model(content):
            calls = ids
        out.extend(messages)
    return out


def system_text(system: System) -> str:
    if isinstance(system, str):
        return system
    parts = parts_in(system) if isinstance(system, dict) else []
    texts = [text for p in parts if isinstance(p, dict) and (text := text_of(p)) is not None]
    return "\n".join(texts)


def from_wire(
    content: WireContent, index: object, calls: Sequence[str] = ()
) -> tuple[list[Message], list[str]]:
    """One wire content as chat-shaped messages, and its call ids (a model content's) or the
    ids its responses answer (a user content's). `calls`: the ids of the model content
    before it, which id-less responses answer by position."""
    parts = [p for p in parts_in(content) if isinstance(p, dict)]
    template: Template = {k: v for k, v in content.items() if k != "parts"}
    if is_model(content):
        ids = [_call_id(call, index, k) for k, call in enumerate(_calls(parts))]
        kept = _original("model", template, parts, list(range(len(parts))), index, ids)
        return [carrying(_converted(kept), kept)], ids
    out: list[Message] = []
    answered: list[str] = []
    rest: list[Part] = []
    at: list[int] = []
    for position, part in enumerate(parts):
        response = response_of(part)
        if response is None:
            rest.append(part)
            at.append(position)
            continue
        answer = _answer_id(response, len(answered), calls)
        answered.append(answer)
        kept = _original("user", template, [part], [position], index, [answer])
        out.append(carrying(_converted(kept), kept))
    if rest or not answered:
        kept = _original("user", template, rest, at, index, [])
        out.append(carrying(_converted(kept), kept))
    return out, answered


def _original(
    role: str, template: Template, parts: list[Part], at: list[int], group: object, ids: list[str]
) -> Original:
    return {
        "role": role,
        "template": template,
        "parts": parts,
        "at": at,
        "group": group,
        "ids": ids,
    }


def _calls(parts: Sequence[Part]) -> list[FunctionCall]:
    return [call for p in parts if (call := call_of(p)) is not None]


def _call_id(call: FunctionCall, index: object, k: int) -> str:
    return given_id(call) or f"{POSITIONAL}{index}-{k}"


def _answer_id(response: FunctionResponse, k: int, calls: Sequence[str]) -> str:
    given = given_id(response)
    if given is not None:
        return given
    return calls[k] if k < len(calls) else f"{POSITIONAL}orphan-{k}"


def _converted(kept: Original) -> Message:
    """The chat fields a wire piece stands for (deterministic: also the 'unchanged' test)."""
    parts = kept["parts"]
    if kept["role"] == "model":
        return _assistant(parts, kept["ids"])
    response = response_of(parts[0]) if len(parts) == 1 else None
    if response is not None:
        return {
            "role": "tool",
            "tool_call_id": kept["ids"][0],
            "content": response_text(response.get("response")),
        }
    return {"role": "user", "content": [chat_part(p) for p in parts]}


def _assistant(parts: list[Part], ids: list[str]) -> Message:
    """A model content's chat message: text parts as content, calls as `tool_calls`, thoughts
    left out."""
    texts: list[ContentPart] = []
    calls: list[FunctionCall] = []
    for part in parts:
        call = call_of(part)
        if call is not None:
            calls.append(call)
        elif not is_thought(part):
            texts.append(chat_part(part))
    message: Message = {"role": "assistant", "content": texts or None}
    if calls:
        message["tool_calls"] = [_tool_call(call, i) for call, i in zip(calls, ids, strict=True)]
    return message


def chat_part(part: Part) -> ContentPart:
    text = text_of(part)
    if text is not None and not is_thought(part):
        return {"type": "text", "text": text}
    if "inlineData" in part or "fileData" in part:
        # Counted with the flat image figure, never by its base64 length.
        return cast(ContentPart, {"type": "image", "gemini": part})
    return cast(ContentPart, {"type": "gemini", "gemini": part})


def _tool_call(call: FunctionCall, call_id: str) -> ToolCall:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": str(call.get("name", "")), "arguments": arguments_of(call)},
    }


def arguments_of(call: FunctionCall) -> str:
    return orjson.dumps(call.get("args") or {}).decode()


def response_text(response: object) -> str:
    """A `functionResponse.response` as the tool message's text: its one string, else JSON."""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in _RESPONSE_KEYS and isinstance(value, str):
            return value
    return orjson.dumps(response if response is not None else {}).decode()


# -- chat to wire -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RenderedView:
    system: System | None  # the `systemInstruction` field, None for none
    contents: list[WireContent]


def render_view(view: Sequence[Message]) -> RenderedView:
    system: System | None = None
    pieces: list[Piece] = []
    names: dict[str, str] = {}  # call id -> function name, for responses ctxgate writes
    for message in view:
        kept = original(message)
        chat = chat_fields(message)
        head = kept is None or "system" in kept
        if not pieces and head and chat.role in ("system", "developer"):
            system = _system_value(chat.content, kept, system)
            continue
        for call in map(chat_call, chat.tool_calls or []):
            names[call.id] = call.name
        pieces.append(_piece(chat, kept, names))
    return RenderedView(system, repaired(merged(pieces)))


def _system_value(
    content: str | list[ContentPart] | None, kept: Original | None, before: System | None
) -> System:
    text = content if isinstance(content, str) else _joined_text(content)
    if before is None and kept is not None and text == system_text(kept["system"]):
        return kept["system"]
    if before is not None:
        text = system_text(before) + "\n\n" + text
    template = kept["system"] if kept is not None else None
    base: Template = dict(template) if isinstance(template, dict) else {}
    return cast(WireContent, {**base, "parts": [{"text": text}]})


def _joined_text(content: Sequence[ContentPart] | None) -> str:
    parts = content if isinstance(content, list) else []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _piece(chat: ChatFields, kept: Original | None, names: dict[str, str]) -> Piece:
    if kept is not None and "parts" in kept:
        if chat == chat_fields(_converted(kept)):
            parts = list(kept["parts"])
            return {
                "role": kept["role"],
                "parts": parts,
                "at": [float(a) for a in kept["at"]],
                "keys": _keys(parts, kept["ids"]),
                "template": kept["template"],
                "group": kept["group"],
                "written": False,
            }
        return _rebuilt(chat, kept, names)
    role = "model" if chat.role == "assistant" else "user"
    return _rebuilt(chat, _original(role, {"role": role}, [], [], None, []), names)


def _keys(parts: list[Part], ids: list[str]) -> list[str | None]:
    """Each part's chat id: the calls' and answers' ids in order, None for the rest."""
    left = iter(ids)
    return [next(left, None) if is_call(p) or is_answer(p) else None for p in parts]


def _rebuilt(chat: ChatFields, kept: Original, names: dict[str, str]) -> Piece:
    ids: list[str] = []
    if chat.role == "assistant":
        parts = _model_parts(chat, kept)
        ids = [call.id for call in map(chat_call, chat.tool_calls or [])]
    elif chat.role == "tool":
        call_id = str(chat.tool_call_id) if chat.tool_call_id is not None else ""
        parts = [_response_part(chat.content, call_id, kept["parts"], names)]
        ids = [call_id]
    else:
        parts = parts_of(chat.content)
    first = float(kept["at"][0]) if kept["at"] else 0.0
    return {
        "role": "model" if chat.role == "assistant" else "user",
        "parts": parts,
        "at": [first + k / (len(parts) + 1) for k in range(len(parts))],
        "keys": _keys(parts, ids),
        "template": kept["template"],
        "group": kept["group"],
        "written": True,
    }


def _model_parts(chat: ChatFields, kept: Original) -> list[Part]:
    old = kept["parts"]
    parts = [p for p in old if is_thought(p)]
    unused = [p for p in old if not is_thought(p) and not is_call(p)]
    content = chat.content
    wanted: Sequence[ContentPart] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    )
    for part in wanted:
        if not isinstance(part, dict):
            continue
        same = next((p for p in unused if chat_part(p) == part), None)
        if same is not None:
            unused.remove(same)
            parts.append(same)
        else:
            parts.extend(parts_of([part]))
    by_id = dict(zip(kept["ids"], [p for p in old if is_call(p)], strict=False))
    for call in map(chat_call, chat.tool_calls or []):
        parts.append(_call_part(call, by_id.get(call.id)))
    return parts


def _call_part(call: ChatCall, old: Part | None) -> Part:
    before = call_of(old) if old is not None else None
    if old is not None and before is not None:
        if before.get("name") == call.name and call.arguments == arguments_of(before):
            return old  # as it came, signature and all
    made: FunctionCall = {"name": call.name, "args": _args(call.arguments)}
    had_id = before is not None and "id" in before
    if had_id or (old is None and call.id and not call.id.startswith(POSITIONAL)):
        made = {"id": call.id, **made}
    part: Part = {"functionCall": made}
    if old is not None and SIGNATURE in old:
        part[SIGNATURE] = DUMMY_SIGNATURE
    return part


def _args(arguments: object) -> object:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else {}
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _response_part(
    content: str | list[ContentPart] | None, call_id: str, old: list[Part], names: dict[str, str]
) -> Part:
    before = old[0] if old else Part()
    template = response_of(before) if isinstance(before, dict) else None
    response = template.copy() if template is not None else FunctionResponse()
    text = content if isinstance(content, str) else _joined_text(content)
    response["name"] = response.get("name") or names.get(call_id, "")
    response["response"] = _response_with(response.get("response"), text)
    if "id" not in response and call_id and not call_id.startswith(POSITIONAL):
        response = {"id": call_id, **response}
    response.pop("parts", None)  # multimodal results the new text replaces
    part = before.copy()
    part.pop("functionResponse", None)  # it goes last, as ctxgate's own part
    part["functionResponse"] = response
    return part


def _response_with(before: object, text: str) -> dict[str, str]:
    if isinstance(before, dict) and len(before) == 1:
        (key,) = before
        if key in _RESPONSE_KEYS:
            return {key: text}
    return {"output": text}


class _ChatPart(TypedDict, total=False):
    """A chat content part as the compressor hands it back: the door's own parts hold the
    Gemini part they stand for (`chat_part`)."""

    type: str
    text: str
    gemini: Part


def parts_of(content: str | Sequence[ContentPart] | None) -> list[Part]:
    """Chat content as Gemini parts (a part kept from the wire goes back as it was)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    out: list[Part] = []
    for chat in cast(Sequence[_ChatPart], content or []):
        if not isinstance(chat, dict):
            continue
        kind = chat.get("type")
        if isinstance(kept := chat.get("gemini"), dict):
            out.append(kept)
        elif kind == "text" and chat.get("text"):
            out.append({"text": str(chat["text"])})
        elif kind not in (None, "text"):
            out.append({"text": f"[{kind} omitted]"})
    return out
