"""The parts of the Gemini API the door reads and writes (pure).

TypedDicts only describe: at run time every value stays the plain dict the client or the
provider sent, so fields the door does not name (and Google's later additions) travel
untouched. A request body is checked once (`request.py`) and read as `RequestBody` from then
on; an answer or a stream chunk is read where it arrives (`answer_of`), and each field Google
may leave out is checked where it is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, NotRequired, TypedDict, cast

from compression import ContentPart, Message, ToolCall
from proxy.doors import sse_data
from session.ports.frontdoor import original_of, with_original


class FunctionCall(TypedDict, total=False):
    id: str  # Gemini 3 sets one; older models and clients leave it out
    name: str
    args: object  # a JSON object


class FunctionResponse(TypedDict, total=False):
    id: str
    name: str
    response: object  # a JSON object, by convention {"output": …} or {"error": …}
    parts: list[object]  # multimodal results


class Part(TypedDict, total=False):
    """One part of a content: text (a thought when `thought` is set), inline or file data, a
    function call or a function response; a signature may come with any of them."""

    text: str
    thought: bool
    thoughtSignature: str
    inlineData: object
    fileData: object
    functionCall: FunctionCall
    functionResponse: FunctionResponse


class WireContent(TypedDict):
    role: NotRequired[str]  # "user" or "model" ("user" when left out)
    parts: list[Part]


# A content without its parts: every other field, kept as the client sent it.
Template = dict[str, object]
System = WireContent | str  # the `systemInstruction` field (a bare string is accepted too)


class GenerationConfig(TypedDict, total=False):
    maxOutputTokens: int


class FunctionDeclaration(TypedDict, total=False):
    name: str
    description: str
    parameters: dict[str, object]  # the OpenAPI subset
    parametersJsonSchema: object  # or full JSON Schema


class Tool(TypedDict, total=False):
    """A tool: function declarations, or a built-in (`googleSearch`, …) named by its key."""

    functionDeclarations: list[FunctionDeclaration]


class RequestBody(TypedDict):
    """A `generateContent` body as `request.py` checked it (the types of the optional fields
    ctxgate does not check are as documented, not as checked)."""

    contents: list[WireContent]
    systemInstruction: NotRequired[System]
    tools: NotRequired[list[Tool]]
    generationConfig: NotRequired[GenerationConfig]


def request_body(body: dict[str, Any]) -> RequestBody:
    """A body `request.py` has checked, as what it is."""
    return cast(RequestBody, body)


class UsageMetadata(TypedDict, total=False):
    promptTokenCount: int  # cached tokens included
    cachedContentTokenCount: int
    candidatesTokenCount: int
    thoughtsTokenCount: int


class Candidate(TypedDict, total=False):
    content: WireContent
    finishReason: str


class ErrorDetail(TypedDict, total=False):
    code: int
    message: str
    status: str


class Answer(TypedDict, total=False):
    """A `GenerateContentResponse`: an answer, or one chunk of a stream (or an error)."""

    candidates: list[Candidate]
    usageMetadata: UsageMetadata
    error: ErrorDetail


def answer_of(data: bytes) -> Answer | None:
    """An answer or chunk, when `data` is a JSON object."""
    return cast(Answer | None, sse_data.json_object(data))


def first_candidate(answer: Answer) -> Candidate | None:
    candidates = answer.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else None


# Readers of the part and content fields that are missing from some kinds of part: each is
# read here and nowhere else.


def text_of(part: Part) -> str | None:
    text = part.get("text")
    return text if isinstance(text, str) else None


def is_thought(part: Part) -> bool:
    return bool(part.get("thought"))


def call_of(part: Part) -> FunctionCall | None:
    call = part.get("functionCall")
    return call if isinstance(call, dict) else None


def response_of(part: Part) -> FunctionResponse | None:
    response = part.get("functionResponse")
    return response if isinstance(response, dict) else None


def is_call(part: Part) -> bool:
    return isinstance(part.get("functionCall"), dict)


def is_answer(part: Part) -> bool:
    return isinstance(part.get("functionResponse"), dict)


def is_model(content: WireContent) -> bool:
    return content.get("role") == "model"


def parts_in(content: WireContent) -> list[Part]:
    return content.get("parts") or []


def given_id(value: FunctionCall | FunctionResponse) -> str | None:
    """A call's or response's own id (None when it has none)."""
    given = value.get("id")
    return given if isinstance(given, str) and given else None


class Original(TypedDict, total=False):
    """What a chat message keeps under `ORIGINAL`: `system` (the field), or the parts of one
    wire content that it stands for."""

    system: System
    role: str  # "user" or "model"
    template: Template
    parts: list[Part]
    at: list[int]  # each part's position in its content
    group: object  # the wire content it came from (its index; None: written by ctxgate)
    ids: list[str]  # the chat ids of its calls, or of the calls its responses answer


# The contract's own functions, typed for this door's originals (bound, not wrapped: they run
# for every message). `original`: the wire piece a chat message was converted from (None for
# ctxgate's own); `carrying`: the message, keeping the wire piece it was converted from.
original = cast(Callable[[Message], Original | None], original_of)
carrying = cast(Callable[[Message, Original], Message], with_original)


class ChatFields(NamedTuple):
    """The fields of a chat-shaped message the door reads (each may be missing); two
    messages with equal fields render alike. (Read for every message rendered: a NamedTuple
    is built and compared in a fraction of a frozen dataclass's time.)"""

    role: str | None
    content: str | list[ContentPart] | None
    tool_calls: list[ToolCall] | None
    tool_call_id: str | None


def chat_fields(message: Message) -> ChatFields:
    return ChatFields(
        message.get("role"),
        message.get("content"),
        message.get("tool_calls"),
        message.get("tool_call_id"),
    )


class ChatCall(NamedTuple):
    """A chat-shaped tool call, as the door reads it."""

    id: str
    name: str
    arguments: object  # JSON text, as the model wrote it (or whatever the compressor left)


def chat_call(call: ToolCall) -> ChatCall:
    function = call.get("function")
    function = function if isinstance(function, dict) else None
    return ChatCall(
        str(call.get("id", "")),
        str(function.get("name", "")) if function else "",
        function.get("arguments") if function else None,
    )
