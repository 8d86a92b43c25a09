"""Chat Completions and ctxgate's own tool: reading its calls from answers and streams, and
keeping them from the client.

An answer's assistant message is sent back in the next round with only the calls ctxgate
answers (the client's calls have no answer in this request); a reasoning field a provider
wants back (`reasoning_content`) travels with it.
"""

from __future__ import annotations

from typing import cast

import orjson

from compression import Message, ToolCall
from proxy.doors.chat.shapes import (
    CHUNK_HEAD,
    AnswerChoice,
    AnswerMessage,
    CallRead,
    ChoiceRead,
    call_name,
    choices_of,
)
from proxy.doors.sse_data import data_of, json_object, with_data
from session.ports.frontdoor import AnswerCalls
from session.ports.frontdoor import ToolCall as OwnCall

_KEPT = ("role", "content", "reasoning_content")  # of the answer's message, beside its calls


def tool_calls(answer: bytes, name: str) -> AnswerCalls | None:
    data = json_object(answer)
    choices = choices_of(data, "message") if data is not None else []
    message = choices[0] if choices else None
    if message is None or message.turn is None or message.calls is None:
        return None
    ours = [c for c in message.calls if call_name(c) == name]
    if not ours:
        return None
    # In the answer's order: the next round sends it back as the provider wrote it.
    kept = {k: message.turn[k] for k in _KEPT if message.turn.get(k) is not None}
    kept["role"] = "assistant"
    kept.setdefault("content", None)
    kept["tool_calls"] = ours
    pieces = [CallRead.of(c) for c in ours if isinstance(c, dict)]
    calls = tuple(OwnCall(c.id or "", name, str(c.arguments or "")) for c in pieces)
    return AnswerCalls(cast(Message, kept), calls)


def without_calls(answer: bytes, name: str) -> bytes:
    data = json_object(answer)
    if data is None:
        return answer
    changed = False
    for choice in choices_of(data, "message"):
        message = choice.turn
        if message is not None and _strip(message, choice.calls, name):
            changed = True
            if "tool_calls" not in message and choice.finish_reason == "tool_calls":
                choice.choice["finish_reason"] = "stop"
    return orjson.dumps(data) if changed else answer


def _strip(message: dict[str, object], calls: list[object] | None, name: str) -> bool:
    """Take the calls to `name` out of the message's `calls`; whether there were any."""
    if calls is None:
        return False
    rest = [c for c in calls if call_name(c) != name]
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
        self._head: dict[str, object] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, ToolCall] = {}
        self._finish: str | None = None
        self._usage: object = None  # the usage chunk's, as it came

    def feed(self, data: bytes) -> None:
        if not data or data.strip() == b"[DONE]":
            return
        chunk = json_object(data)
        if chunk is None:
            return
        for key in CHUNK_HEAD:
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in choices_of(chunk, "delta"):
            if choice.choice_index == 0:
                self._choice(choice)

    def _choice(self, choice: ChoiceRead) -> None:
        if isinstance(choice.finish_reason, str) and choice.finish_reason:
            self._finish = choice.finish_reason
        text = choice.content
        if isinstance(text, str) and text:
            self._text.append(text)
            if text.strip():
                self._decide("answer")
        if isinstance(choice.reasoning, str):
            self._reasoning.append(choice.reasoning)
        for piece in choice.calls or ():
            if isinstance(piece, dict):
                self._call(CallRead.of(piece))

    def _call(self, piece: CallRead) -> None:
        call = self._calls.setdefault(
            piece.call_index,
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if piece.id:
            call["id"] = piece.id
        if piece.name:
            call["function"]["name"] += piece.name
            self._decide("recall" if call["function"]["name"] == self.name else "answer")
        if isinstance(piece.arguments, str) and piece.arguments:
            call["function"]["arguments"] += piece.arguments

    def _decide(self, verdict: str) -> None:
        if self.decided is None:
            self.decided = verdict

    def answer(self) -> bytes:
        message: AnswerMessage = {"role": "assistant", "content": "".join(self._text) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        choice: AnswerChoice = {"index": 0, "message": message, "finish_reason": self._finish}
        # A `ChatAnswer`, after the stream's head fields.
        answer = {**self._head, "object": "chat.completion", "choices": [choice]}
        if self._usage is not None:
            answer["usage"] = self._usage
        return orjson.dumps(answer)


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
        kept = [self._choice(choice) for choice in choices_of(chunk, "delta")]
        if not any(kept) and not chunk.get("usage"):
            return None
        return with_data(event, orjson.dumps(chunk))

    def _choice(self, choice: ChoiceRead) -> bool:
        """Filter one choice in place; whether anything is left in it for the client."""
        delta = choice.turn
        if delta is not None and choice.calls is not None:
            rest = [p for p in map(self._piece, choice.calls) if p is not None]
            if rest:
                delta["tool_calls"] = rest
            else:
                del delta["tool_calls"]
        finish = choice.finish_reason
        if finish == "tool_calls" and self._hidden and not self._shown:
            finish = choice.choice["finish_reason"] = "stop"
        return bool(finish or delta)

    def _piece(self, piece: object) -> object:
        if not isinstance(piece, dict):
            return piece
        read = CallRead.of(piece)
        if read.name == self.name:
            self._hidden.add(read.call_index)
        elif read.name and read.call_index not in self._shown:
            self._shown[read.call_index] = len(self._shown)
        if read.call_index in self._hidden:
            return None
        return {**piece, "index": self._shown.get(read.call_index, read.call_index)}
