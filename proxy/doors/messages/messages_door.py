"""The Anthropic Messages front door: `POST /v1/messages` (Claude Code, the `anthropic` SDK).

`system` and the messages become chat-shaped messages for the core (see `messages_blocks`);
a request ctxgate does not change is forwarded as the client's bytes, a changed one is rebuilt
with every field ctxgate does not use untouched, the client's cache breakpoints kept and the
ones left spent on the rewritten prefix (see `messages_cache`). ctxgate's own tool (offered,
called, answered, hidden from the client) is `messages_recall`'s business.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson

from compression import Message, SummaryCall, SummaryReply, ToolSchema
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.messages import events
from proxy.doors.messages import recall_tool as recall
from proxy.doors.messages.blocks import render_view
from proxy.doors.messages.cache import place_breakpoints
from proxy.doors.messages.compaction_blocks import dead_prefix
from proxy.doors.messages.request import read_body
from proxy.doors.messages.wire_types import (
    Block,
    Original,
    Thinking,
    carrying,
    original,
    request_body,
)
from session.errors import ProxyError, UpstreamStatus
from session.overflow import Overflow, classify_overflow
from session.ports.frontdoor import AnswerCalls, Usage, WireRequest, original_of


class MessagesDoor:
    api: str = "messages"
    paths: tuple[str, ...] = ("/v1/messages", "/messages")
    upstream_path: str = "/messages"
    grows: str | None = "messages"

    def parse(
        self, raw: bytes, earlier: GrownBodies | None = None, *, max_messages: int = 0
    ) -> WireRequest:
        # Converted messages are not the body's array: the gateway counts them.
        read = read_body(raw, earlier)
        return WireRequest(
            raw=raw,
            body=read.body,
            model=read.model,
            messages=read.messages,
            stream=read.stream,
            max_tokens=read.max_tokens,
            tools=read.tools,
            session_hint=read.session_hint,
            passthrough=_passthrough(read.body, read.messages),
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
        sent = request_body(request.body)
        rendered = render_view(
            without_stale_markers(view, request.messages), dead_prefix(sent["messages"])
        )
        body = sent.copy()
        offered = sent.get("tools")
        if tools:
            offered = body["tools"] = recall.with_tools(offered, tools)
        system, messages = place_breakpoints(
            rendered.system, rendered.messages, offered, rendered.last_written
        )
        if system is None:
            body.pop("system", None)
        else:
            body["system"] = system
        body["messages"] = messages
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
            thinking = _thinking_within(body.get("thinking"), max_tokens)
            if thinking is not None:
                body["thinking"] = thinking
        return orjson.dumps(body)

    def usage(self, answer: bytes) -> Usage | None:
        return events.answer_usage(answer)

    def watch(self, request: WireRequest) -> events.MessagesWatch:
        return events.MessagesWatch()

    def stream_error(self, data: bytes) -> int | None:
        return events.error_status(data)

    def overflow(self, status: int, body: bytes) -> Overflow | None:
        return classify_overflow(status, body)

    def error_body(self, error: ProxyError) -> bytes:
        if isinstance(error, UpstreamStatus):
            return error.body()  # the provider's own envelope
        return events.error_body(error.status_code, error.message)

    def summary_body(self, call: SummaryCall, model: str) -> bytes:
        return events.summary_body(call, model)

    def summary_reply(self, answer: bytes) -> SummaryReply:
        return events.summary_reply(answer)

    def tool_calls(self, answer: bytes, name: str) -> AnswerCalls | None:
        return recall.tool_calls(answer, name)

    def without_calls(self, answer: bytes, name: str) -> bytes:
        return recall.without_calls(answer, name)

    def answer_stream(self, name: str) -> recall.MessagesAnswerStream:
        return recall.MessagesAnswerStream(name)

    def call_filter(self, name: str) -> recall.MessagesCallFilter:
        return recall.MessagesCallFilter(name)


# Anthropic's on-demand compaction (`"compaction": {"type": "summarize"}`): the provider
# summarises the history the client sends, which must be the client's own.
ON_DEMAND = "compaction: the provider compacts this history itself"


def _passthrough(body: dict[str, Any], messages: list[Message]) -> str | None:
    if not messages:
        return "no messages"
    return ON_DEMAND if request_body(body).get("compaction") is not None else None


def without_stale_markers(view: list[Message], current: list[Message]) -> list[Message]:
    """The view with `cache_control` removed from messages the client no longer sends as they
    are (a checkpoint keeps the markers of the turn it was made on; the client has moved them
    since, and a fifth breakpoint is refused)."""
    mine = {id(m) for m in current}
    keys: set[bytes] | None = None
    out: list[Message] = []
    for message in view:
        kept = original(message)
        if id(message) in mine or kept is None or "blocks" not in kept:
            out.append(message)
            continue
        if keys is None:
            keys = {orjson.dumps(original_of(m)) for m in current}
        if orjson.dumps(kept) in keys or not _has_marker(kept):
            out.append(message)
        else:
            out.append(_unmarked(message, kept))
    return out


def _has_marker(value: Original) -> bool:
    return b'"cache_control"' in orjson.dumps(value)


def _unmarked(message: Message, kept: Original) -> Message:
    copied = cast(Message, _strip(dict(message)))
    stripped = kept.copy()
    stripped["blocks"] = cast(list[Block], _strip(kept["blocks"]))
    return carrying(copied, stripped)


def _strip(value: object) -> object:
    """A copy of content without `cache_control` keys in blocks (nested tool_result content too)."""
    if isinstance(value, list):
        return [_strip(item) for item in value]
    if isinstance(value, dict):
        return {
            k: (_strip(v) if k in ("content", "blocks") else v)
            for k, v in value.items()
            if k != "cache_control"
        }
    return value


_MIN_THINKING = 1024  # the smallest `budget_tokens` the API takes


def _thinking_within(thinking: Thinking | None, max_tokens: int) -> Thinking | None:
    """The `thinking` setting that fits a lowered `max_tokens` (None: the client's fits): the
    API refuses a budget that is not below it. Half the output goes to thinking, at least its
    minimum; with no room for that, thinking is turned off for this request."""
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < max_tokens:
        return None
    if max_tokens <= _MIN_THINKING:
        return {"type": "disabled"}
    return {**thinking, "budget_tokens": max(_MIN_THINKING, max_tokens // 2)}
