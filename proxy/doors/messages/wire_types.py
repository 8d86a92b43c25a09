"""The parts of the Anthropic Messages API the door reads and writes (pure).

TypedDicts only describe: at run time every value stays the plain dict the client or the
provider sent, so fields the door does not name travel untouched. A request body is checked
once (`request.py`) and read as `RequestBody` from then on; an answer or a stream event is read
where it arrives (`answer_of`, `read_event`), and each field the provider may leave out is
checked where it is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, NotRequired, TypedDict, cast

from compression import ContentPart, Message, ToolCall
from proxy.doors import sse_data
from session.ports.frontdoor import original_of, with_original


class CacheControl(TypedDict, total=False):
    type: str  # "ephemeral"
    ttl: str  # "5m" or "1h"


class Block(TypedDict, total=False):
    """A content block; which fields it holds depends on its `type`."""

    type: str  # documented as required; a client's block is forwarded whatever it holds
    text: str  # text
    cache_control: CacheControl
    id: str  # tool_use
    name: str  # tool_use
    input: object  # tool_use: a JSON object
    tool_use_id: str  # tool_result
    content: str | list[Block] | None  # tool_result's content, compaction's summary
    thinking: str  # thinking
    signature: str  # thinking
    citations: list[object]  # text


System = str | list[Block]  # the `system` field


# Readers of the block fields that are missing from some kinds of block (and from a client's
# malformed block, forwarded as it is): each is read here and nowhere else.


def kind(block: Block) -> str | None:
    return block.get("type")


def call_id(block: Block) -> str | None:
    """A `tool_use` block's id."""
    return block.get("id")


def answers(block: Block) -> str | None:
    """The id of the call a `tool_result` block answers."""
    return block.get("tool_use_id")


def text_of(block: Block) -> str | None:
    return block.get("text")


def thinking_of(block: Block) -> str | None:
    return block.get("thinking")


def content_of(block: Block) -> str | list[Block] | None:
    """A `tool_result`'s content, or a compaction block's summary (null: a failed one)."""
    return block.get("content")


class ToolUse(NamedTuple):
    """A `tool_use` block's call, as the door reads it."""

    id: str
    name: str
    input: object  # a JSON object


def tool_use(block: Block) -> ToolUse:
    return ToolUse(str(block.get("id", "")), str(block.get("name", "")), input_of(block))


def input_of(block: Block) -> object:
    """A `tool_use` block's input (an empty object when it has none)."""
    return block.get("input", {})


class WireMessage(TypedDict):
    role: str  # "user", "assistant", or "system" (a reminder among the turns)
    content: str | list[Block]


# A wire message without its content: every other field, kept as the client sent it.
Template = dict[str, object]


class Tool(TypedDict, total=False):
    name: str
    description: str
    input_schema: object
    cache_control: CacheControl


class Metadata(TypedDict, total=False):
    user_id: str


class Thinking(TypedDict, total=False):
    type: str  # "enabled" or "disabled"
    budget_tokens: int


class RequestBody(TypedDict):
    """A request body as `request.py` checked it (the types of the optional fields ctxgate
    does not check are as documented, not as checked)."""

    model: str
    messages: list[WireMessage]
    system: NotRequired[System]
    stream: NotRequired[bool]
    max_tokens: NotRequired[int]
    tools: NotRequired[list[Tool]]
    metadata: NotRequired[Metadata]
    thinking: NotRequired[Thinking]
    compaction: NotRequired[object]  # on-demand compaction's settings


def request_body(body: dict[str, Any]) -> RequestBody:
    """A body `request.py` has checked, as what it is."""
    return cast(RequestBody, body)


class AnswerUsage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class Answer(TypedDict, total=False):
    """A Message object: a non-streamed answer, or `message_start`'s message."""

    type: str
    role: str
    content: list[Block]
    stop_reason: str | None
    usage: AnswerUsage


class Delta(TypedDict, total=False):
    """`content_block_delta`'s delta (by its `type`) or `message_delta`'s (stop reason)."""

    type: str  # text_delta, thinking_delta, signature_delta, input_json_delta, citations_delta
    text: str
    thinking: str
    signature: str
    partial_json: str
    citation: object
    stop_reason: str | None


class ErrorDetail(TypedDict, total=False):
    type: str
    message: str


class Event(TypedDict, total=False):
    """A stream event's data (its `type` says which fields it holds)."""

    type: str
    message: Answer  # message_start
    index: int  # content_block_*
    content_block: Block  # content_block_start
    delta: Delta  # content_block_delta, message_delta
    usage: AnswerUsage  # message_delta
    error: ErrorDetail  # error


def answer_of(data: bytes) -> Answer | None:
    """A non-streamed answer, when `data` is a JSON object."""
    return cast(Answer | None, sse_data.json_object(data))


class StreamEvent(NamedTuple):
    """A stream event's data, each field the door reads checked once (None: missing, or not
    of its type)."""

    type: str
    block_index: int | None  # content_block_*: `index`
    message: Answer | None  # message_start
    content_block: Block | None  # content_block_start
    delta: Delta | None  # content_block_delta, message_delta
    usage: AnswerUsage | None  # message_delta
    data: Event  # all of it


def read_event(data: bytes) -> StreamEvent | None:
    """An event's data, when it is a JSON object with a `type`."""
    if not data.lstrip().startswith(b"{"):
        return None  # a comment, or nothing an event holds
    event = cast(Event | None, sse_data.json_object(data))
    kind = event.get("type") if event is not None else None
    if event is None or not isinstance(kind, str):
        return None
    index, message = event.get("index"), event.get("message")
    block, delta, usage = event.get("content_block"), event.get("delta"), event.get("usage")
    return StreamEvent(
        kind,
        index if isinstance(index, int) else None,
        message if isinstance(message, dict) else None,
        block if isinstance(block, dict) else None,
        delta if isinstance(delta, dict) else None,
        usage if isinstance(usage, dict) else None,
        event,
    )


class ChatFields(NamedTuple):
    """The fields of a chat-shaped message a door reads (each may be missing); two messages
    with equal fields render alike. (Read for every message rendered: a NamedTuple is built and
    compared in a fraction of a frozen dataclass's time.)"""

    role: str | None
    content: str | list[ContentPart] | None
    tool_calls: list[ToolCall] | None
    tool_call_id: str | None
    name: str | None


def chat_fields(message: Message) -> ChatFields:
    return ChatFields(
        message.get("role"),
        message.get("content"),
        message.get("tool_calls"),
        message.get("tool_call_id"),
        message.get("name"),
    )


class CompactionOriginal(TypedDict):
    message: WireMessage  # the compaction turn, as the client sent it
    results: list[Block]  # the next message's `tool_result` blocks answering its calls
    results_template: Template | None
    end: int  # the index of the first wire message after the head


class Original(TypedDict, total=False):
    """What a chat message keeps under `ORIGINAL`: one of `system` (the field), `compaction`
    (a compaction turn) or the rest (blocks of one wire message)."""

    system: System
    compaction: CompactionOriginal
    role: str
    template: Template
    blocks: list[Block]
    string: bool  # the content was a string
    after: list[WireMessage]  # `role: system` entries that followed it


# The contract's own functions, typed for this door's originals (bound, not wrapped: they run
# for every message). `original`: the wire piece a chat message was converted from (None for
# ctxgate's own); `carrying`: the message, keeping the wire piece it was converted from.
original = cast(Callable[[Message], Original | None], original_of)
carrying = cast(Callable[[Message, Original], Message], with_original)
