"""The Gemini API front door: `POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent` (Gemini CLI, the `google-genai` SDKs).

The model and the streaming flag live in the path, so the edge makes one door per request with
`GeminiDoor.at(model, stream, query)`; the registry's instance serves only what needs no path
(errors, summaries). `systemInstruction` and the contents become chat-shaped messages for the
core (see `parts.py`); a request ctxgate does not change is forwarded as the client's bytes, a
changed one is rebuilt with every field ctxgate does not use untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from compression import Message, SummaryCall, SummaryReply, ToolSchema
from proxy.doors.gemini import events
from proxy.doors.gemini import recall_tool as recall
from proxy.doors.gemini.contents import request_body
from proxy.doors.gemini.parts import render_view
from proxy.doors.gemini.request import read_body
from proxy.doors.grown_bodies import GrownBodies
from session.errors import BadRequest, ProxyError, UpstreamStatus
from session.overflow import Overflow, classify_overflow
from session.ports.frontdoor import AnswerCalls, Usage, WireRequest

GENERATE = "generateContent"
STREAM = "streamGenerateContent"


class GeminiDoor:
    api: str = "gemini"
    paths: tuple[str, ...] = ()  # served by pattern: see proxy.edge.gemini_routes
    grows: str | None = None
    upstream_path: str

    def __init__(
        self,
        model: str = "",
        stream: bool = False,
        query: str = "",
        refused: BadRequest | None = None,
    ) -> None:
        self.model = model
        self.stream = stream
        self.refused = refused  # the path or key was malformed: every request is refused
        method = STREAM if stream else GENERATE
        # The client's query goes on, less its key (a header by now) and `alt`.
        asked = "&".join(q for q in ("alt=sse" if stream else "", query) if q)
        self.upstream_path = f"/models/{model}:{method}" + (f"?{asked}" if asked else "")

    @classmethod
    def at(
        cls, model: str, stream: bool, query: str = "", refused: BadRequest | None = None
    ) -> GeminiDoor:
        return cls(model, stream, query, refused)

    def parse(
        self, raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
    ) -> WireRequest:
        if self.refused is not None:
            raise self.refused
        # Converted messages are not the body's array: the gateway counts them.
        read = read_body(raw)
        return WireRequest(
            raw=raw,
            body=read.body,
            model=self.model,
            messages=read.messages,
            stream=self.stream,
            max_tokens=read.max_tokens,
            tools=read.tools,
            passthrough=None if read.messages else "no contents",
            image_marks=read.image_marks,
        )

    def render(
        self,
        request: WireRequest,
        view: list[Message],
        max_tokens: int | None,
        tools: Sequence[ToolSchema] = (),
    ) -> bytes:
        if view is request.messages and max_tokens is None and not tools:
            return request.raw
        rendered = render_view(view)
        body = request_body(request.body).copy()
        if tools:
            body["tools"] = recall.with_tools(body.get("tools"), tools)
        if rendered.system is None:
            body.pop("systemInstruction", None)
        else:
            body["systemInstruction"] = rendered.system
        body["contents"] = rendered.contents
        if max_tokens is not None:
            config = body.get("generationConfig")
            body["generationConfig"] = {
                **(config if isinstance(config, dict) else {}),
                "maxOutputTokens": max_tokens,
            }
        return orjson.dumps(body)

    def usage(self, answer: bytes) -> Usage | None:
        return events.answer_usage(answer)

    def watch(self, request: WireRequest) -> events.GeminiWatch:
        return events.GeminiWatch()

    def stream_error(self, data: bytes) -> int | None:
        return events.error_status(data)

    def overflow(self, status: int, body: bytes) -> Overflow | None:
        return classify_overflow(status, body)

    def error_body(self, error: ProxyError) -> bytes:
        if isinstance(error, UpstreamStatus):
            return error.body()  # the provider's own envelope
        return events.error_body(error.status_code, error.message)

    def summary_body(self, call: SummaryCall, model: str) -> bytes:
        return events.summary_body(call)

    def summary_reply(self, answer: bytes) -> SummaryReply:
        return events.summary_reply(answer)

    def tool_calls(self, answer: bytes, name: str) -> AnswerCalls | None:
        return recall.tool_calls(answer, name)

    def without_calls(self, answer: bytes, name: str) -> bytes:
        return recall.without_calls(answer, name)

    def answer_stream(self, name: str) -> recall.GeminiAnswerStream:
        return recall.GeminiAnswerStream(name)

    def call_filter(self, name: str) -> recall.GeminiCallFilter:
        return recall.GeminiCallFilter(name)
