"""Chat Completions and ctxgate's own tool: reading its calls from answers and streams, and
keeping them from the client.

An answer's assistant message is sent back in the next round with only the calls ctxgate
answers (the client's calls have no answer in this request); a reasoning field a provider
wants back (`reasoning_content`) travels with it.
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from compression import Message
from proxy.doors.sse_data import data_of, json_object, with_data
from session.ports.door import AnswerCalls, ToolCall

_KEPT = ("role", "content", "reasoning_content")


def tool_calls(answer: bytes, name: str) -> AnswerCalls | None:
    try:
        data = orjson.loads(answer)
        message = data["choices"][0]["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    ours = [c for c in message.get("tool_calls") or [] if _name(c) == name]
    if not ours:
        return None
    kept: dict[str, Any] = {k: message[k] for k in _KEPT if message.get(k) is not None}
    kept["role"] = "assistant"
    kept.setdefault("content", None)
    kept["tool_calls"] = ours
    calls = tuple(
        ToolCall(str(c.get("id") or ""), name, str(_function(c).get("arguments") or ""))
        for c in ours
    )
    return AnswerCalls(cast(Message, kept), calls)


def without_calls(answer: bytes, name: str) -> bytes:
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return answer
    changed = False
    for choice in data.get("choices") or [] if isinstance(data, dict) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and _strip(message, name):
            changed = True
            if not message.get("tool_calls") and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
    return orjson.dumps(data) if changed else answer


def _strip(message: dict[str, Any], name: str) -> bool:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return False
    rest = [c for c in calls if _name(c) != name]
    if len(rest) == len(calls):
        return False
    if rest:
        message["tool_calls"] = rest
    else:
        del message["tool_calls"]
    return True


class ChatAnswerStream:
    """Chat chunks added up into a `chat.completion`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.decided: str | None = None
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, data: bytes) -> None:
        if not data or data.strip() == b"[DONE]":
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            if text.strip():
                self._decide("answer")
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str):
            self._reasoning.append(reasoning)
        for piece in delta.get("tool_calls") or []:
            self._call(piece)

    def _call(self, piece: dict[str, Any]) -> None:
        call = self._calls.setdefault(
            int(piece.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if piece.get("id"):
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
            self._decide("recall" if call["function"]["name"] == self.name else "answer")
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]

    def _decide(self, verdict: str) -> None:
        if self.decided is None:
            self.decided = verdict

    def answer(self) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        body: dict[str, Any] = {
            **self._head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            body["usage"] = self._usage
        return orjson.dumps(body)


class ChatCallFilter:
    """Drops the tool-call deltas of ctxgate's tool and renumbers the client's calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._hidden: set[int] = set()
        self._shown: dict[int, int] = {}

    @property
    def hid(self) -> bool:
        return bool(self._hidden)

    def event(self, event: bytes) -> bytes | None:
        if b"tool_calls" not in event or b"data:" not in event:
            return event
        chunk = json_object(data_of(event))
        if chunk is None:
            return event
        kept = [self._choice(c) for c in chunk.get("choices") or [] if isinstance(c, dict)]
        if not any(kept) and not chunk.get("usage"):
            return None
        return with_data(event, orjson.dumps(chunk))

    def _choice(self, choice: dict[str, Any]) -> bool:
        """Filter one choice in place; whether anything is left in it for the client."""
        delta = choice.get("delta")
        pieces = delta.get("tool_calls") if isinstance(delta, dict) else None
        if isinstance(pieces, list):
            assert isinstance(delta, dict)
            rest = [p for p in (self._piece(p) for p in pieces) if p is not None]
            if rest:
                delta["tool_calls"] = rest
            else:
                del delta["tool_calls"]
        if choice.get("finish_reason") == "tool_calls" and self._hidden and not self._shown:
            choice["finish_reason"] = "stop"
        return bool(choice.get("finish_reason") or (isinstance(delta, dict) and delta))

    def _piece(self, piece: Any) -> Any:
        if not isinstance(piece, dict):
            return piece
        index = int(piece.get("index", 0))
        name = (piece.get("function") or {}).get("name")
        if name == self.name:
            self._hidden.add(index)
        elif name and index not in self._shown:
            self._shown[index] = len(self._shown)
        if index in self._hidden:
            return None
        return {**piece, "index": self._shown.get(index, index)}


def _function(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}


def _name(call: Any) -> str | None:
    name = _function(call).get("name")
    return name if isinstance(name, str) else None
