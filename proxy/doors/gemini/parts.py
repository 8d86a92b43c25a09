"""Gemini `systemInstruction` + `contents` to chat-shaped messages and back (pure).

    chat = to_chat(system, contents)       # what the compressor works on
    system, contents = render_view(view)   # what goes upstream

Each chat message carries the wire content it came from under `ORIGINAL` (plain JSON):

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
from typing import Any, cast

import orjson

from compression import ContentPart, Message, ToolCall
from proxy.doors.gemini.pairs import (
    DUMMY_SIGNATURE,
    SIGNATURE,
    Part,
    Piece,
    WireContent,
    is_answer,
    is_call,
    merged,
    repaired,
)
from session.ports.door import original_of, with_original

POSITIONAL = "gemini-pos-"  # ids ctxgate gave calls that had none; never sent upstream
_CHAT_FIELDS = ("role", "content", "tool_calls", "tool_call_id")
# The one string a tool's `response` object holds, under the keys Gemini CLI and the SDKs use.
_RESPONSE_KEYS = ("output", "error", "content", "result")

# -- wire to chat -------------------------------------------------------------------------------


def to_chat(system: Any, contents: Sequence[Any], start: int = 0) -> list[Message]:
    """The chat-shaped conversation: `systemInstruction` first, then every content (numbered
    from `start`)."""
    out: list[Message] = []
    if isinstance(system, (dict, str)) and system_text(system):
        head = cast(Message, {"role": "system", "content": system_text(system)})
        out.append(with_original(head, {"system": system}))
    calls: list[str] = []  # the ids of the last model content's calls
    for index, content in enumerate(contents, start):
        if not isinstance(content, dict):
            continue
        messages, ids = from_wire(cast(WireContent, content), index, calls)
        if content.get("role") == "model":
            calls = ids
        out.extend(messages)
    return out


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    parts = system.get("parts") if isinstance(system, dict) else None
    texts = [
        p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts)


def from_wire(
    content: WireContent, index: Any, calls: Sequence[str] = ()
) -> tuple[list[Message], list[str]]:
    """One wire content as chat-shaped messages, and its call ids (a model content's) or the
    ids its responses answer (a user content's). `calls`: the ids of the model content
    before it, which id-less responses answer by position."""
    role = "model" if content.get("role") == "model" else "user"
    parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
    template = {k: v for k, v in content.items() if k != "parts"}
    if role == "model":
        ids = [_call_id(p, index, k) for k, p in enumerate(_calls(parts))]
        original = _original(role, template, parts, list(range(len(parts))), index, ids)
        return [with_original(_converted(original), original)], ids
    out: list[Message] = []
    answered: list[str] = []
    rest: list[Part] = []
    at: list[int] = []
    for position, part in enumerate(parts):
        if not isinstance(part.get("functionResponse"), dict):
            rest.append(part)
            at.append(position)
            continue
        answer = _answer_id(part["functionResponse"], len(answered), calls)
        answered.append(answer)
        original = _original(role, template, [part], [position], index, [answer])
        out.append(with_original(_converted(original), original))
    if rest or not answered:
        original = _original(role, template, rest, at, index, [])
        out.append(with_original(_converted(original), original))
    return out, answered


def _original(
    role: str,
    template: dict[str, Any],
    parts: list[Part],
    at: list[int],
    group: Any,
    ids: list[str],
) -> dict[str, Any]:
    return {
        "role": role,
        "template": template,
        "parts": parts,
        "at": at,
        "group": group,
        "ids": ids,
    }


def _calls(parts: Sequence[Part]) -> list[Part]:
    return [p for p in parts if isinstance(p.get("functionCall"), dict)]


def _call_id(part: Part, index: Any, k: int) -> str:
    given = part["functionCall"].get("id")
    return given if isinstance(given, str) and given else f"{POSITIONAL}{index}-{k}"


def _answer_id(response: dict[str, Any], k: int, calls: Sequence[str]) -> str:
    given = response.get("id")
    if isinstance(given, str) and given:
        return given
    return calls[k] if k < len(calls) else f"{POSITIONAL}orphan-{k}"


def _converted(original: dict[str, Any]) -> Message:
    """The chat fields a wire piece stands for (deterministic: also the 'unchanged' test)."""
    parts: list[Part] = original["parts"]
    if original["role"] == "model":
        texts = [chat_part(p) for p in parts if not p.get("thought") and not is_call(p)]
        message = cast(Message, {"role": "assistant", "content": texts or None})
        calls = _calls(parts)
        if calls:
            message["tool_calls"] = [
                _tool_call(p["functionCall"], i)
                for p, i in zip(calls, original["ids"], strict=True)
            ]
        return message
    if len(parts) == 1 and isinstance(parts[0].get("functionResponse"), dict):
        response = parts[0]["functionResponse"]
        return cast(
            Message,
            {
                "role": "tool",
                "tool_call_id": original["ids"][0],
                "content": response_text(response.get("response")),
            },
        )
    return cast(Message, {"role": "user", "content": [chat_part(p) for p in parts]})


def is_text(part: Part) -> bool:
    """A visible text part (thoughts are the model's own, kept only in the original)."""
    return isinstance(part.get("text"), str) and not part.get("thought")


def chat_part(part: Part) -> ContentPart:
    if isinstance(part.get("text"), str) and not part.get("thought"):
        return {"type": "text", "text": part["text"]}
    if "inlineData" in part or "fileData" in part:
        # Counted with the flat image figure, never by its base64 length.
        return cast(ContentPart, {"type": "image", "gemini": part})
    return cast(ContentPart, {"type": "gemini", "gemini": part})


def _tool_call(call: dict[str, Any], call_id: str) -> ToolCall:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": str(call.get("name", "")), "arguments": arguments_of(call)},
    }


def arguments_of(call: dict[str, Any]) -> str:
    return orjson.dumps(call.get("args") or {}).decode()


def response_text(response: Any) -> str:
    """A `functionResponse.response` as the tool message's text: its one string, else JSON."""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in _RESPONSE_KEYS and isinstance(value, str):
            return value
    return orjson.dumps(response if response is not None else {}).decode()


# -- chat to wire -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RenderedView:
    system: Any  # the `systemInstruction` field, None for none
    contents: list[WireContent]


def render_view(view: Sequence[Message]) -> RenderedView:
    system: Any = None
    pieces: list[Piece] = []
    names: dict[str, str] = {}  # call id -> function name, for responses ctxgate writes
    for message in view:
        original = original_of(message)
        head = original is None or "system" in original
        if not pieces and head and message.get("role") in ("system", "developer"):
            system = _system_value(message, original, system)
            continue
        for call in message.get("tool_calls") or []:
            function: dict[str, Any] = dict(call.get("function") or {})
            names[str(call.get("id"))] = str(function.get("name", ""))
        pieces.append(_piece(message, original, names))
    return RenderedView(system, repaired(merged(pieces)))


def _system_value(message: Message, original: dict[str, Any] | None, before: Any) -> Any:
    content = message.get("content")
    text = content if isinstance(content, str) else _joined_text(content)
    if before is None and original is not None and text == system_text(original["system"]):
        return original["system"]
    if before is not None:
        text = system_text(before) + "\n\n" + text
    template = original["system"] if original is not None else None
    base = dict(template) if isinstance(template, dict) else {}
    return {**base, "parts": [{"text": text}]}


def _joined_text(content: Any) -> str:
    parts = content if isinstance(content, list) else []
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _piece(message: Message, original: dict[str, Any] | None, names: dict[str, str]) -> Piece:
    if original is not None and "parts" in original:
        if _fields(message) == _fields(_converted(original)):
            parts = list(original["parts"])
            return {
                "role": original["role"],
                "parts": parts,
                "at": [float(a) for a in original["at"]],
                "keys": _keys(parts, original["ids"]),
                "template": original["template"],
                "group": original["group"],
                "written": False,
            }
        return _rebuilt(message, original, names)
    role = "model" if message.get("role") == "assistant" else "user"
    fresh = _original(role, {"role": role}, [], [], None, [])
    return _rebuilt(message, fresh, names)


def _keys(parts: list[Part], ids: list[str]) -> list[str | None]:
    """Each part's chat id: the calls' and answers' ids in order, None for the rest."""
    left = iter(ids)
    return [next(left, None) if is_call(p) or is_answer(p) else None for p in parts]


def _fields(message: Message) -> list[Any]:
    fields = cast(dict[str, Any], message)
    return [fields.get(name) for name in _CHAT_FIELDS]


def _rebuilt(message: Message, original: dict[str, Any], names: dict[str, str]) -> Piece:
    old: list[Part] = original["parts"]
    role = message.get("role")
    ids: list[str] = []
    if role == "assistant":
        parts = _model_parts(message, original)
        ids = [str(call.get("id", "")) for call in message.get("tool_calls") or []]
    elif role == "tool":
        parts = [_response_part(message, old, names)]
        ids = [str(message.get("tool_call_id", ""))]
    else:
        parts = parts_of(message.get("content"))
    first = float(original["at"][0]) if original["at"] else 0.0
    return {
        "role": "model" if role == "assistant" else "user",
        "parts": parts,
        "at": [first + k / (len(parts) + 1) for k in range(len(parts))],
        "keys": _keys(parts, ids),
        "template": original["template"],
        "group": original["group"],
        "written": True,
    }


def _model_parts(message: Message, original: dict[str, Any]) -> list[Part]:
    old: list[Part] = original["parts"]
    parts = [p for p in old if p.get("thought")]
    unused = [p for p in old if not p.get("thought") and not is_call(p)]
    content = message.get("content")
    for chat in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
        if not isinstance(chat, dict):
            continue
        same = next((p for p in unused if chat_part(p) == chat), None)
        if same is not None:
            unused.remove(same)
            parts.append(same)
        else:
            parts.extend(parts_of([chat]))
    by_id = dict(zip(original["ids"], _calls(old), strict=False))
    for call in message.get("tool_calls") or []:
        parts.append(_call_part(call, by_id.get(str(call.get("id")))))
    return parts


def _call_part(call: Any, old: Part | None) -> Part:
    function = call.get("function") or {}
    name, arguments = str(function.get("name", "")), function.get("arguments")
    if old is not None:
        before = old["functionCall"]
        if before.get("name") == name and arguments == arguments_of(before):
            return old  # as it came, signature and all
    made: dict[str, Any] = {"name": name, "args": _args(arguments)}
    call_id = str(call.get("id", ""))
    had_id = old is not None and "id" in old["functionCall"]
    if had_id or (old is None and call_id and not call_id.startswith(POSITIONAL)):
        made = {"id": call_id, **made}
    part: Part = {"functionCall": made}
    if old is not None and SIGNATURE in old:
        part[SIGNATURE] = DUMMY_SIGNATURE
    return part


def _args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else {}
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _response_part(message: Message, old: list[Part], names: dict[str, str]) -> Part:
    before = old[0] if old else {}
    template = before.get("functionResponse") if isinstance(before, dict) else None
    response = dict(template) if isinstance(template, dict) else {}
    call_id = str(message.get("tool_call_id", ""))
    content = message.get("content")
    text = content if isinstance(content, str) else _joined_text(content)
    response["name"] = response.get("name") or names.get(call_id, "")
    response["response"] = _response_with(response.get("response"), text)
    if "id" not in response and call_id and not call_id.startswith(POSITIONAL):
        response = {"id": call_id, **response}
    response.pop("parts", None)  # multimodal results the new text replaces
    return {
        **{k: v for k, v in before.items() if k != "functionResponse"},
        "functionResponse": response,
    }


def _response_with(before: Any, text: str) -> dict[str, Any]:
    if isinstance(before, dict) and len(before) == 1:
        (key,) = before
        if key in _RESPONSE_KEYS:
            return {key: text}
    return {"output": text}


def parts_of(content: Any) -> list[Part]:
    """Chat content as Gemini parts (a part kept from the wire goes back as it was)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    out: list[Part] = []
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("gemini"), dict):
            out.append(part["gemini"])
        elif part.get("type") == "text" and part.get("text"):
            out.append({"text": str(part["text"])})
        elif part.get("type") not in (None, "text"):
            out.append({"text": f"[{part.get('type')} omitted]"})
    return out
