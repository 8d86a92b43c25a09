"""The OpenAI Responses front door: `POST /v1/responses`, streamed or not.

Input items become chat-shaped messages that carry their items (`items.py`), the view
goes back as items (`render.py`), and the stream is read by `ResponsesWatch`. A request
ctxgate does not change, or must not (its history is on the provider), is forwarded as the
client's bytes. ctxgate's own tool (offered, called, answered, hidden from the client) is
`responses_recall`'s business.
"""

from __future__ import annotations

from collections.abc import Sequence

from compression import Message, SummaryCall, SummaryReply, ToolSchema
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.responses import recall_tool as responses_recall
from proxy.doors.responses import stream as responses_stream
from proxy.doors.responses import wire as responses_wire
from proxy.doors.responses.recall_tool import ResponsesAnswerStream, ResponsesCallFilter
from proxy.doors.responses.stream import ResponsesWatch
from session.errors import ProxyError
from session.overflow import Overflow
from session.ports.frontdoor import AnswerCalls, Usage, WireRequest


class ResponsesDoor:
    api: str = "responses"
    paths: tuple[str, ...] = ("/v1/responses", "/responses")
    upstream_path: str = "/responses"
    grows: str | None = "input"

    def parse(
        self, raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
    ) -> WireRequest:
        # Converted messages are not the body's array: the gateway counts them.
        return responses_wire.parse_request(raw, earlier)

    def render(
        self,
        request: WireRequest,
        view: list[Message],
        max_tokens: int | None,
        tools: Sequence[ToolSchema] = (),
    ) -> bytes:
        if tools:
            return responses_recall.render_request(request, view, max_tokens, tools)
        if request.passthrough or (view is request.messages and max_tokens is None):
            return request.raw
        return responses_wire.render_request(request, view, max_tokens)

    def usage(self, answer: bytes) -> Usage | None:
        return responses_wire.answer_usage(answer)

    def watch(self, request: WireRequest) -> ResponsesWatch:
        return ResponsesWatch()

    def stream_error(self, data: bytes) -> int | None:
        return responses_stream.stream_error(data)

    def overflow(self, status: int, body: bytes) -> Overflow | None:
        return responses_stream.overflow(status, body)

    def error_body(self, error: ProxyError) -> bytes:
        return error.body()  # OpenAI's envelope, as for Chat Completions

    def summary_body(self, call: SummaryCall, model: str) -> bytes:
        return responses_wire.summary_body(call, model)

    def summary_reply(self, answer: bytes) -> SummaryReply:
        return responses_wire.summary_reply(answer)

    def tool_calls(self, answer: bytes, name: str) -> AnswerCalls | None:
        return responses_recall.tool_calls(answer, name)

    def without_calls(self, answer: bytes, name: str) -> bytes:
        return responses_recall.without_calls(answer, name)

    def answer_stream(self, name: str) -> ResponsesAnswerStream:
        return ResponsesAnswerStream(name)

    def call_filter(self, name: str) -> ResponsesCallFilter:
        return ResponsesCallFilter(name)
