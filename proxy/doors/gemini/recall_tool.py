"""ctxgate's own tool in the Gemini API: offered, called, answered, hidden (pure).

    with_tools(client_tools, tools)     the `tools` field with ctxgate's declarations added
    tool_calls(answer, name)            the answer's turn, when it calls `name`
    without_calls(answer, name)         the answer without those calls
    GeminiAnswerStream(name)            a stream added up into its answer
    GeminiCallFilter(name)              a relayed stream without those calls

The turn that calls the tool goes into the next round as the answer's parts (thoughts and
their signatures, text, the calls to `name`); calls to the client's tools are left out, since
nothing answers them in this request. A step's first call carries the thought signature: when
the call that held it is left out (or hidden), the first call kept gets Google's documented
dummy signature instead, never an invented value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from compression import ToolSchema
from proxy.doors import bodies
from proxy.doors.gemini.contents import (
    Answer,
    Candidate,
    Part,
    Tool,
    WireContent,
    answer_of,
    call_of,
    first_candidate,
    is_call,
    is_thought,
    parts_in,
)
from proxy.doors.gemini.pairs import DUMMY_SIGNATURE, SIGNATURE
from proxy.doors.gemini.parts import POSITIONAL, arguments_of, from_wire
from proxy.doors.sse_data import data_of, with_data
from session.ports.frontdoor import AnswerCalls, ToolCall

_STRIPPED = frozenset({"additionalProperties"})  # not in the OpenAPI subset `parameters` takes


def with_tools(client_tools: list[Tool] | None, tools: Sequence[ToolSchema]) -> list[Any]:
    """The client's tools, with ctxgate's declared beside the client's functions (in the
    same schema field the client uses), unless the client has a function of that name."""
    out: list[Tool] = list(client_tools) if isinstance(client_tools, list) else []
    at = next(
        (
            i
            for i, tool in enumerate(out)
            if isinstance(tool, dict) and isinstance(tool.get("functionDeclarations"), list)
        ),
        None,
    )
    client = out[at]["functionDeclarations"] if at is not None else []
    plain = any(isinstance(d, dict) and "parameters" in d for d in client)

    def declaration(name: Any, description: str, schema: Any) -> dict[str, Any]:
        if plain:
            stripped = {k: v for k, v in schema.items() if k not in _STRIPPED}
            return {"name": name, "description": description, "parameters": stripped}
        return {"name": name, "description": description, "parametersJsonSchema": schema}

    declared = bodies.with_tools(client, tools, declaration)
    if at is None:
        out.append({"functionDeclarations": declared})
    else:
        out[at] = {**out[at], "functionDeclarations": declared}
    return out


def calls_tool(part: Part, name: str) -> bool:
    call = call_of(part) if isinstance(part, dict) else None
    return call is not None and call.get("name") == name


def _is_call(part: Part) -> bool:
    return isinstance(part, dict) and is_call(part)


def _parts(answer: Answer) -> list[Part] | None:
    first = first_candidate(answer)
    content = first.get("content") if first is not None else None
    parts = parts_in(content) if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else None


def resigned(kept: list[Part], parts: list[Part]) -> list[Part]:
    """`kept` (a subset of `parts`, in order) with the dummy on its first call when the
    signature of the step was on a call left out."""
    calls = [p for p in kept if _is_call(p)]
    lost = any(_is_call(p) and SIGNATURE in p and all(p is not k for k in kept) for p in parts)
    if not lost or not calls or SIGNATURE in calls[0]:
        return kept
    return [{**p, SIGNATURE: DUMMY_SIGNATURE} if p is calls[0] else p for p in kept]


# -- a finished answer --------------------------------------------------------------------------


def tool_calls(answer: bytes, name: str) -> AnswerCalls | None:
    data = answer_of(answer)
    parts = _parts(data) if data is not None else None
    if parts is None:
        return None
    ours = [p for p in parts if calls_tool(p, name)]
    if not ours:
        return None
    kept = [p for p in parts if isinstance(p, dict) and (not _is_call(p) or calls_tool(p, name))]
    kept = resigned(kept, [p for p in parts if isinstance(p, dict)])
    group = "recall-" + hashlib.sha1(orjson.dumps(kept)).hexdigest()[:16]
    wire: WireContent = {"role": "model", "parts": kept}
    messages, ids = from_wire(wire, group)
    by_part = dict(zip((id(p) for p in kept if _is_call(p)), ids, strict=True))
    calls = tuple(
        ToolCall(
            id=by_part.get(id(p), f"{POSITIONAL}{group}"),
            name=name,
            arguments=arguments_of(call),
        )
        for p in kept
        if calls_tool(p, name) and (call := call_of(p)) is not None
    )
    return AnswerCalls(message=messages[0], calls=calls)


def without_calls(answer: bytes, name: str) -> bytes:
    data = answer_of(answer)
    parts = _parts(data) if data is not None else None
    if data is None or parts is None:
        return answer
    kept = [p for p in parts if not calls_tool(p, name)]
    if len(kept) == len(parts):
        return answer
    return orjson.dumps(_with_first_parts(data, resigned(kept, parts)))


def _with_first_parts(answer: Answer, parts: list[Part]) -> Answer:
    """The answer (or chunk) with its first candidate's parts replaced."""
    candidates = list(answer["candidates"])
    first: Candidate = candidates[0].copy()
    first["content"] = {**first["content"], "parts": parts}
    candidates[0] = first
    return {**answer, "candidates": candidates}


# -- streams ------------------------------------------------------------------------------------


class GeminiAnswerStream:
    """The answer a stream stands for: every chunk's parts in order, the last chunk's
    `finishReason` and `usageMetadata`, the first chunk's other fields."""

    def __init__(self, name: str) -> None:
        self.decided: str | None = None
        self._name = name
        self._top: dict[str, object] = {}
        self._parts: list[Part] = []
        self._candidate: dict[str, object] = {}

    def feed(self, data: bytes) -> None:
        chunk = answer_of(data)
        if chunk is None or "error" in chunk:
            return
        for key, value in chunk.items():
            if key != "candidates" and (key not in self._top or key == "usageMetadata"):
                self._top[key] = value
        parts = _parts(chunk) or []
        first = first_candidate(chunk)
        if first is not None:
            self._candidate.update({k: v for k, v in first.items() if k != "content"})
        for part in parts:
            if not isinstance(part, dict):
                continue
            self._parts.append(part)
            if self.decided is None and not is_thought(part):
                if _is_call(part):
                    self.decided = "recall" if calls_tool(part, self._name) else "answer"
                elif part.get("text"):
                    self.decided = "answer"

    def answer(self) -> bytes:
        candidate = {**self._candidate, "content": {"role": "model", "parts": self._parts}}
        return orjson.dumps({"candidates": [candidate], **self._top})


class GeminiCallFilter:
    """Drops the `functionCall` parts for `name` from relayed chunks (a chunk left with
    nothing to say is dropped); the client's first call after a hidden signed one gets the
    dummy signature. A chunk that does not name the tool passes untouched."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._marker = orjson.dumps(name)
        self._hidden = False
        self._lost_signature = False  # a hidden call held the step's signature
        self._client_calls = False  # a call of the client's reached the client

    @property
    def hid(self) -> bool:
        return self._hidden

    def event(self, event: bytes) -> bytes | None:
        named = self._marker in event
        if not named and not (self._lost_signature and b'"functionCall"' in event):
            if b'"functionCall"' in event:
                self._client_calls = True
            return event
        chunk = answer_of(data_of(event))
        parts = _parts(chunk) if chunk is not None else None
        if chunk is None or parts is None:
            return event
        kept = self._kept(parts)
        if len(kept) == len(parts) and all(a is b for a, b in zip(kept, parts, strict=True)):
            return event
        candidates = chunk["candidates"]
        if not kept and len(candidates) == 1 and "finishReason" not in candidates[0]:
            if "usageMetadata" not in chunk:
                return None
        return with_data(event, orjson.dumps(_with_first_parts(chunk, kept)))

    def _kept(self, parts: list[Part]) -> list[Part]:
        kept: list[Part] = []
        for part in parts:
            if calls_tool(part, self._name):
                self._hidden = True
                self._lost_signature |= SIGNATURE in part and not self._client_calls
                continue
            if _is_call(part):
                if self._lost_signature and not self._client_calls and SIGNATURE not in part:
                    part = {**part, SIGNATURE: DUMMY_SIGNATURE}
                self._client_calls = True
            kept.append(part)
        return kept
