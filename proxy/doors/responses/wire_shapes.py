"""Wire shapes of the OpenAI Responses API, as far as the Responses door reads or writes them.

TypedDicts: at run time each stays the plain dict that came, so fields ctxgate does not know
ride along untouched. A request body's fields are checked by `wire.py` (a mistake is the
client's, and a BadRequest says which); items are classified by `items.item_kind`, which reads
their `type` once; answers and events are read by the readers of the modules that use them,
which take a field that is not of its documented type as absent (a provider's oddity must not
break the relay).
"""

from __future__ import annotations

from typing import Literal, NotRequired, Required, TypedDict

# -- a request ----------------------------------------------------------------------------------


class Item(TypedDict, total=False):
    """An input or output item of any kind, with the fields the door reads of one; which kind
    has which (everything else an item holds rides along):

        message (`type` absent or "message")   role, content (a string or parts)
        function_call                          call_id, name, arguments (JSON text)
        custom_tool_call                       call_id, name, input (free text)
        other *_call (local_shell_call, ...)   call_id, its own fields (the call's arguments)
        *_call_output                          call_id (older items: id), output
        reasoning                              encrypted_content (when asked for: `store: false`)
        compaction                             encrypted_content (the provider's summary)
    """

    type: str
    id: str
    role: str  # user | assistant | system | developer
    content: str | list[Part]
    call_id: str
    name: str
    arguments: str
    input: str
    output: str | list[Part]
    encrypted_content: str | None
    status: str


class Part(TypedDict, total=False):
    """A content part: `input_text` / `output_text` (text; annotations and logprobs ride
    along), `input_image`, `input_file`, `refusal`, audio."""

    type: Required[str]
    text: str


class FunctionTool(TypedDict):
    """A function tool as a request offers it (a built-in tool has only its `type`)."""

    type: Literal["function"]
    name: str
    description: str
    parameters: object  # a JSON schema


class ResponsesBody(TypedDict, total=False):
    """A request body: the fields ctxgate acts on (everything else rides along)."""

    model: Required[str]
    input: str | list[Item]
    instructions: str | None
    stream: bool | None
    max_output_tokens: int | None
    tools: list[FunctionTool] | None
    prompt_cache_key: str  # a session hint
    previous_response_id: str | None  # history on the provider: forwarded untouched
    conversation: object  # likewise
    store: bool


# -- an answer ----------------------------------------------------------------------------------


class InputTokensDetails(TypedDict, total=False):
    cached_tokens: int


class ResponsesUsage(TypedDict):
    input_tokens: int  # cached tokens included
    output_tokens: int
    input_tokens_details: NotRequired[InputTokensDetails]


class IncompleteDetails(TypedDict):
    reason: str  # "max_output_tokens", "content_filter"


class ResponseError(TypedDict, total=False):
    """An error object: a failed response's `error`, an `error` event's (or the event itself,
    in the older shape that has its fields at the top)."""

    code: str | int | None
    message: str
    param: str | None


class Response(TypedDict, total=False):
    """A response object: the answer, and the `response` of every lifecycle event."""

    id: str
    status: str  # completed | incomplete | failed | in_progress | queued
    output: list[Item]
    usage: ResponsesUsage
    incomplete_details: IncompleteDetails | None
    error: ResponseError | None
    store: bool


# -- a stream -----------------------------------------------------------------------------------


class ResponseEvent(TypedDict):
    """A lifecycle event: response.created / .in_progress / .completed / .incomplete /
    .failed."""

    type: str
    response: Response
    sequence_number: int


class ItemEvent(TypedDict):
    """response.output_item.added / .done."""

    type: str
    output_index: int
    item: Item
    sequence_number: int


class ErrorEvent(TypedDict):
    """An `error` event, as OpenAI sends when a stream fails."""

    type: Literal["error"]
    code: str | None
    message: str
    param: str | None
    sequence_number: int
