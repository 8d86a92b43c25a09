"""Wire shapes of the Chat Completions API, as far as the chat door reads or writes them, and
the readers that check a value from the wire once and hand it on typed.

The TypedDicts describe the documented shapes; at run time each stays the plain dict that came,
so fields ctxgate does not know ride along untouched. A request body is checked by `request.py`
(a mistake is the client's, and a BadRequest says which); answers and chunks by the readers
here, which take a field that is not of its documented type as absent (a provider's oddity
must not break the relay).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple, NotRequired, Required, TypedDict, TypeGuard

from compression import Message, ToolCall, ToolSchema
from proxy.doors.sse_data import count_at, text_at
from session.ports.frontdoor import Usage

# -- a request ----------------------------------------------------------------------------------


class StreamOptions(TypedDict, total=False):
    include_usage: bool


class Metadata(TypedDict, total=False):
    session_id: str  # not an OpenAI field: a client's session id, when it sends one


class ChatBody(TypedDict, total=False):
    """A request body: the fields ctxgate acts on (everything else rides along)."""

    model: Required[str]
    messages: Required[list[Message]]
    stream: bool | None
    stream_options: StreamOptions | None
    max_tokens: int | None
    max_completion_tokens: int | None  # what newer clients send in place of `max_tokens`
    tools: list[ToolSchema] | None
    metadata: Metadata
    temperature: float


class FunctionTool(TypedDict):
    """A tool as a request offers it."""

    type: Literal["function"]
    function: FunctionDeclaration


class FunctionDeclaration(TypedDict):
    name: str
    description: str
    parameters: object  # a JSON schema


# -- an answer ----------------------------------------------------------------------------------


class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int


class ChatUsage(TypedDict):
    prompt_tokens: int  # cached tokens included
    completion_tokens: NotRequired[int]
    prompt_tokens_details: NotRequired[PromptTokensDetails]


class AnswerMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: NotRequired[str]  # what DeepSeek and vLLM want back with the turn
    tool_calls: NotRequired[list[ToolCall]]


class AnswerChoice(TypedDict):
    index: int
    message: AnswerMessage
    finish_reason: str | None


class ChatAnswer(TypedDict):
    """A `chat.completion`; the head fields (`id`, `created`, `model`, ...) ride along."""

    object: Literal["chat.completion"]
    choices: list[AnswerChoice]
    usage: NotRequired[ChatUsage]


# -- a stream -----------------------------------------------------------------------------------

CHUNK_HEAD = ("id", "created", "model", "system_fingerprint")  # a chunk's fields an answer keeps


class FunctionDelta(TypedDict, total=False):
    name: str  # in the call's first piece
    arguments: str  # a piece of the JSON text


class ToolCallDelta(TypedDict, total=False):
    index: Required[int]
    id: str  # in the call's first piece
    type: Literal["function"]
    function: FunctionDelta


class Delta(TypedDict, total=False):
    role: str
    content: str | None
    reasoning_content: str
    tool_calls: list[ToolCallDelta]


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    finish_reason: str | None


class ChatChunk(TypedDict):
    """A `chat.completion.chunk`; the usage chunk has no choices."""

    object: Literal["chat.completion.chunk"]
    choices: list[ChunkChoice]
    usage: NotRequired[ChatUsage | None]


# -- readers ------------------------------------------------------------------------------------


def token_counts(answer: Mapping[str, object] | None) -> tuple[int | None, int | None, int | None]:
    """The prompt, completion and cached prompt tokens of an answer's (or the usage chunk's)
    `ChatUsage`, each when it is a count."""
    usage = answer.get("usage") if answer is not None else None
    if not isinstance(usage, dict):
        return None, None, None
    details = usage.get("prompt_tokens_details")
    cached = count_at(details, "cached_tokens") if isinstance(details, dict) else None
    return count_at(usage, "prompt_tokens"), count_at(usage, "completion_tokens"), cached


def answer_usage(answer: Mapping[str, object] | None) -> Usage | None:
    """The `Usage` of an answer, or of the usage chunk, when it has its prompt tokens."""
    prompt, completion, cached = token_counts(answer)
    return None if prompt is None else Usage(prompt, completion, min(cached or 0, prompt))


def is_call(call: object) -> TypeGuard[ToolCall]:
    """Whether `call` is a tool call as a request's message holds one: an object with a string
    `id` and a `function` object (its name and arguments are the client's business)."""
    return type(call) is dict and type(call.get("id")) is str and type(call.get("function")) is dict


class CallRead(NamedTuple):
    """A `ToolCall` in an answer, or a stream's `ToolCallDelta` (which may carry neither name
    nor arguments): a field not of its documented type is taken as absent (the arguments are
    kept as they came)."""

    call_index: int  # which call of the turn a stream's piece belongs to
    id: str | None
    name: str | None
    arguments: object

    @classmethod
    def of(cls, call: Mapping[str, object]) -> CallRead:
        index, call_id = count_at(call, "index") or 0, text_at(call, "id")
        function = call.get("function")
        if not isinstance(function, dict):
            return cls(index, call_id, None, None)
        return cls(index, call_id, text_at(function, "name"), function.get("arguments"))


def call_name(call: object) -> str | None:
    """The function name of a tool call in an answer, when it has one."""
    function = call.get("function") if isinstance(call, dict) else None
    return text_at(function, "name") if isinstance(function, dict) else None


_ABSENT: Mapping[str, object] = {}


class ChoiceRead(NamedTuple):
    """One of the `choices` of a `ChatAnswer` or a `ChatChunk`, as it came (a call filter
    changes it in place), with what ctxgate reads of it and of its `turn`: the answer's
    `AnswerMessage` or the chunk's `Delta` (they have the same fields)."""

    choice: dict[str, object]
    choice_index: object
    finish_reason: object
    turn: dict[str, object] | None  # when it is an object
    content: object
    reasoning: object  # `reasoning_content`
    calls: list[object] | None  # `tool_calls`, when it is an array


def choices_of(data: Mapping[str, object], turn: Literal["message", "delta"]) -> list[ChoiceRead]:
    """The choices of an answer (`turn="message"`) or a chunk (`"delta"`) that are objects."""
    choices = data.get("choices")
    read: list[ChoiceRead] = []
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        said = choice.get(turn)
        fields = said if isinstance(said, dict) else _ABSENT
        calls = fields.get("tool_calls")
        read.append(
            ChoiceRead(
                choice,
                choice.get("index", 0),
                choice.get("finish_reason"),
                said if isinstance(said, dict) else None,
                fields.get("content"),
                fields.get("reasoning_content"),
                calls if isinstance(calls, list) else None,
            )
        )
    return read
