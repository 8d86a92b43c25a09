"""The Chat Completions front door: `POST /v1/chat/completions`.

Its messages are already the compressor's shape, so parsing keeps them as they came and
rendering puts the view back under `messages`. A request ctxgate does not change is forwarded
as the client's bytes (with `stream_options.include_usage` prepended when ctxgate needs the
usage chunk the client did not ask for; that chunk is then kept from the client).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from compression import Message, SummaryCall, SummaryCallError, SummaryReply, ToolSchema
from proxy.doors.bodies import with_tools
from proxy.doors.chat import recall_tool as chat_recall
from proxy.doors.chat.recall_tool import ChatAnswerStream, ChatCallFilter
from proxy.doors.chat.request import client_wants_usage, parse_chat_request, stream_options
from proxy.doors.chat.shapes import ChatBody, FunctionTool, answer_usage, choices_of, token_counts
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.sse_data import json_object
from proxy.doors.streaming import error_event, error_status
from session.errors import ProxyError
from session.overflow import Overflow, classify_overflow
from session.ports.frontdoor import AnswerCalls, Usage, WireRequest

_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_FINISH = re.compile(rb'"finish_reason"\s*:\s*"')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*(\[\s*\]|null)')


class ChatWatch:
    """Chat chunks: the usage chunk, a finish reason or `[DONE]`, error objects."""

    markers: tuple[bytes, ...] = (
        b"[DONE]",
        b'"usage":{',
        b'"usage": {',
        b"error",
        b'reason":"',
        b'reason": "',
    )

    def __init__(self, hide_usage: bool) -> None:
        self.hide_usage = hide_usage
        self.usage: Usage | None = None
        self.finished = False
        self.failed: str | None = None

    def preamble(self, data: bytes) -> bool:
        return False

    def inspect(self, data: bytes) -> bool:
        if not data:
            return True
        if data.strip() == b"[DONE]":
            self.finished = True
            return True
        if error_status(data) is not None:
            self.failed = "upstream sent an error event"
            self.finished = True
            return True
        if _FINISH.search(data):
            self.finished = True
        if _USAGE.search(data):
            usage = _usage_in(data)
            if usage is not None:
                self.usage = usage
                if self.hide_usage and _EMPTY_CHOICES.search(data):
                    return False
        return True

    def error_event(self, message: str) -> bytes:
        return error_event(message)


class ChatDoor:
    api: str = "chat"
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    upstream_path: str = "/chat/completions"
    grows: str | None = "messages"

    def parse(
        self, raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
    ) -> WireRequest:
        return parse_chat_request(raw, earlier, max_messages=max_messages)

    def render(
        self,
        request: WireRequest,
        view: list[Message],
        max_tokens: int | None,
        tools: Sequence[ToolSchema] = (),
    ) -> bytes:
        wants_usage = client_wants_usage(request.body)
        if view is request.messages and max_tokens is None and not tools:
            if not request.stream or wants_usage:
                return request.raw
            if "stream_options" not in request.body:
                # Prepending the key keeps the client's bytes; it is absent, so no duplicate.
                start = request.raw.index(b"{") + 1
                return _USAGE_OPTION + request.raw[start:]
        body: dict[str, object] = dict(request.body)
        body["messages"] = view
        if tools:
            body["tools"] = with_tools(body.get("tools"), tools, _chat_tool)
        if request.stream and not wants_usage:
            body["stream_options"] = {**(stream_options(body) or {}), "include_usage": True}
        if max_tokens is not None:
            key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            body[key] = max_tokens
        return orjson.dumps(body)

    def usage(self, answer: bytes) -> Usage | None:
        return _usage_in(answer)

    def watch(self, request: WireRequest) -> ChatWatch:
        return ChatWatch(hide_usage=not client_wants_usage(request.body))

    def stream_error(self, data: bytes) -> int | None:
        return error_status(data)

    def overflow(self, status: int, body: bytes) -> Overflow | None:
        return classify_overflow(status, body)

    def error_body(self, error: ProxyError) -> bytes:
        return error.body()

    def summary_body(self, call: SummaryCall, model: str) -> bytes:
        body: ChatBody = {
            "model": call.model or model,
            "messages": call.messages,
            "max_tokens": call.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        return orjson.dumps(body)

    def summary_reply(self, answer: bytes) -> SummaryReply:
        data = json_object(answer)
        choices = choices_of(data, "message") if data is not None else []
        if not choices:
            raise SummaryCallError("summary model sent an unreadable answer")
        content, finish = choices[0].content, choices[0].finish_reason
        prompt_tokens, completion_tokens, _ = token_counts(data)
        return SummaryReply(
            text=content if isinstance(content, str) else "",
            finish_reason=finish if isinstance(finish, str) else None,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    def tool_calls(self, answer: bytes, name: str) -> AnswerCalls | None:
        return chat_recall.tool_calls(answer, name)

    def without_calls(self, answer: bytes, name: str) -> bytes:
        return chat_recall.without_calls(answer, name)

    def answer_stream(self, name: str) -> ChatAnswerStream:
        return ChatAnswerStream(name)

    def call_filter(self, name: str) -> ChatCallFilter:
        return ChatCallFilter(name)


def _chat_tool(name: Any, description: str, schema: Any) -> FunctionTool:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def _usage_in(raw: bytes) -> Usage | None:
    return answer_usage(json_object(raw))
