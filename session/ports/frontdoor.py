"""The seam between a wire API and ctxgate's core.

A front door knows one API's shapes (Chat Completions, Responses, Anthropic Messages): it parses
a request body into what the core needs, renders a compressed view back into that API's body,
reads usage from answers and streams, recognises overflows and in-stream errors, and writes
ctxgate's own errors in that API's envelope. The core (sessions, checkpoints, triggers, the
engine, overflow recovery) sees only chat-shaped `Message`s and these values.

    request = door.parse(raw)                         # WireRequest, or BadRequest
    body = door.render(request, view, max_tokens)     # what goes upstream
    usage = door.usage(answer) / door.watch(request)  # what the provider billed

Lossless conversion: a door whose items are not chat messages keeps each item it converted
under `ORIGINAL` in the message it produced; a message the compressor left as it was is
rendered back as those original items, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from compression import Message, SummaryCall, SummaryReply, ToolSchema
from session.errors import ProxyError
from session.overflow import Overflow

ORIGINAL = "_ctxgate_original"


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One client request as the core needs it; `body` keeps every field the core ignores."""

    raw: bytes
    body: dict[str, Any]
    model: str
    messages: list[Message]  # the conversation as the compressor's chat-shaped messages
    stream: bool
    max_tokens: int | None  # the output reservation the client asked for
    tools: list[ToolSchema] | None  # tool schemas in chat shape, for token counting only
    session_hint: str | None = None  # a session id the body carries (headers come first)
    passthrough: str | None = None  # why the request is forwarded untouched, when it is
    # No fewer than the image parts in `raw` (how often IMAGE_MARK occurs, or the parts
    # counted as the messages were checked), when known without a scan of `raw`.
    image_marks: int | None = None


# An image part's key in the Chat and Responses shapes: a short URL can cost hundreds of
# tokens, so the cheap bound on a request's tokens adds a flat cost per occurrence.
IMAGE_MARK = b'"image_url"'


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int  # the whole prompt the provider processed, cached tokens included
    completion_tokens: int | None = None
    cache_read: int = 0  # of prompt_tokens, those the provider read from its prompt cache
    cache_write: int = 0  # of prompt_tokens, those it wrote to the cache (Anthropic bills them)


class StreamWatch(Protocol):
    """Reads one upstream stream as it is relayed; one instance per stream."""

    usage: Usage | None
    finished: bool  # the stream reached its normal end
    failed: str | None  # why the stream counts as failed (an error event, …)
    markers: tuple[bytes, ...]  # an event holding none of these is relayed without `inspect`

    def preamble(self, data: bytes) -> bool:
        """True for lifecycle events that may be held back while looking for an early error."""
        ...

    def inspect(self, data: bytes) -> bool:
        """Note what an event's data says; False drops the event from the client's stream."""
        ...

    def error_event(self, message: str) -> bytes:
        """A complete SSE event reporting a failure on ctxgate's side, in this API's shape."""
        ...


class FrontDoor(Protocol):
    api: str  # "chat", "responses", "messages": what `upstreams.NAME.apis` lists
    paths: tuple[str, ...]  # the client paths it serves
    upstream_path: str  # appended to the upstream's base URL

    def parse(self, raw: bytes) -> WireRequest:
        """The request, or BadRequest saying what is wrong with it."""
        ...

    def render(
        self,
        request: WireRequest,
        view: list[Message],
        max_tokens: int | None,
        tools: Sequence[ToolSchema] = (),
    ) -> bytes:
        """The body to send upstream; `view is request.messages` when nothing was changed.
        `tools` are ctxgate's own (chat-shaped), offered after the client's."""
        ...

    def usage(self, answer: bytes) -> Usage | None:
        """What a non-streamed answer says was billed."""
        ...

    def watch(self, request: WireRequest) -> StreamWatch: ...

    def stream_error(self, data: bytes) -> int | None:
        """The HTTP status an event's data stands for when it reports an error, else None."""
        ...

    def overflow(self, status: int, body: bytes) -> Overflow | None:
        """An `Overflow` when an error answer (or error event) means the prompt is too large."""
        ...

    def error_body(self, error: ProxyError) -> bytes:
        """ctxgate's own error in this API's envelope."""
        ...

    def summary_body(self, call: SummaryCall, model: str) -> bytes:
        """A summary call over this API (when the summary upstream serves it)."""
        ...

    def summary_reply(self, answer: bytes) -> SummaryReply:
        """The summary call's answer; raises SummaryCallError when it is unreadable."""
        ...

    def tool_calls(self, answer: bytes, name: str) -> AnswerCalls | None:
        """A non-streamed answer's calls to ctxgate's tool `name` (None: it makes none)."""
        ...

    def without_calls(self, answer: bytes, name: str) -> bytes:
        """The non-streamed answer with its calls to `name` removed."""
        ...

    def answer_stream(self, name: str) -> AnswerStream: ...

    def call_filter(self, name: str) -> CallFilter: ...


def with_original(message: Message, original: dict[str, Any]) -> Message:
    """The message, keeping the wire piece it was converted from under `ORIGINAL`."""
    cast(dict[str, Any], message)[ORIGINAL] = original
    return message


def original_of(message: Message) -> dict[str, Any] | None:
    """The wire piece a chat message was converted from (None for ctxgate's own)."""
    original = cast(dict[str, Any], message).get(ORIGINAL)
    return original if isinstance(original, dict) else None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made to a tool ctxgate answers itself."""

    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True, slots=True)
class AnswerCalls:
    """A finished answer that calls ctxgate's own tool.

    `message` is the answer's assistant turn as a chat-shaped message holding only those calls
    (with the text and reasoning that came with them, kept under `ORIGINAL` in the door's wire
    form so the next round sends them back exactly); the client's own tool calls are left out,
    since nothing will answer them in this request.
    """

    message: Message
    calls: tuple[ToolCall, ...]


class AnswerStream(Protocol):
    """Adds up one upstream stream's events into the non-streamed answer they stand for."""

    # "recall": the answer's first output is a call to ctxgate's tool; "answer": it is anything
    # else (text, a client tool call); None: nothing telling yet (lifecycle, reasoning).
    decided: str | None

    def feed(self, data: bytes) -> None:
        """One event's data, in stream order."""
        ...

    def answer(self) -> bytes:
        """The non-streamed answer (this API's shape) the events fed so far add up to."""
        ...


class CallFilter(Protocol):
    """Hides calls to ctxgate's tool from a stream relayed to the client (indexes renumbered,
    a finish reason that named only those calls made an ordinary stop)."""

    @property
    def hid(self) -> bool:
        """A call was kept from the client."""
        ...

    def event(self, event: bytes) -> bytes | None:
        """One complete SSE event (with its `event:` line and blank-line end) as the client
        should get it, or None to drop it."""
        ...


class DoorChooser(Protocol):
    """Which door a summary call goes through on an upstream serving `apis`."""

    def __call__(self, apis: tuple[str, ...], request_door: FrontDoor) -> FrontDoor: ...
