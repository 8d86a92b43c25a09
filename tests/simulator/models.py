"""Value types of the simulator API: model specs, scripted behaviours, the received log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"

DIALECTS = (
    "openai",
    "vllm",
    "llamacpp",
    "anthropic",
    "anthropic413",
    "deepseek",
    "tgi",
    "numberless",  # OpenAI's newer wording: no window, no prompt size
    "bare413",  # a 413 without a body, as some gateways send
)

# Whether a dialect adds the request's max_tokens to the prompt when checking the window.
DIALECT_COUNTS_MAX_TOKENS = {
    "openai": True,
    "vllm": True,
    "llamacpp": False,
    "anthropic": True,
    "anthropic413": True,
    "deepseek": True,
    "tgi": True,
    "numberless": True,
    "bare413": False,
}


@dataclass
class ModelSpec:
    """How the simulated provider treats one model.

    window            context length in (simulator-counted) tokens
    dialect           which provider's overflow error to send (see DIALECTS)
    stream_usage      send the final usage chunk when the client asks include_usage
    token_factor      scales the simulator's count (provider tokenizer != ctxgate's estimate)
    max_body_bytes    anthropic413: raw request bytes above this -> 413 (default window * 4)
    count_max_tokens  add max_tokens to the prompt for the window check (None: dialect default)
    default_max_tokens  completion budget assumed when the request has no max_tokens
    usage             include ``usage`` in non-stream replies
    stream_errors     "status": a streaming request that overflows gets the error status like
                      any other; "event": HTTP 200, then the error body as the stream's one
                      event (how OpenRouter, Anthropic and the Responses API report it)
    image_max_bytes, image_max_px  refuse an inline image over these, in the dialect's words
    cache_min_tokens  Messages prompt caching: a breakpoint prefix shorter than this is not
                      cached (the real minimum is 1024 or more, per model)
    """

    window: int
    dialect: str = "openai"
    stream_usage: bool = True
    token_factor: float = 1.0
    max_body_bytes: int | None = None
    count_max_tokens: bool | None = None
    default_max_tokens: int = 0
    usage: bool = True
    stream_errors: str = "status"
    image_max_bytes: int | None = None  # inline images over this many bytes are refused
    image_max_px: int | None = None  # inline images whose longer side exceeds this are refused
    cache_min_tokens: int = 0

    def __post_init__(self) -> None:
        if self.stream_errors not in ("status", "event"):
            raise ValueError("stream_errors must be 'status' or 'event'")
        if self.dialect not in DIALECTS:
            raise ValueError(
                f"unknown dialect {self.dialect!r}; choose one of {', '.join(DIALECTS)}"
            )
        if self.window <= 0:
            raise ValueError("window must be positive")

    @property
    def body_limit(self) -> int:
        return self.max_body_bytes if self.max_body_bytes is not None else self.window * 4

    @property
    def counts_max_tokens(self) -> bool:
        if self.count_max_tokens is not None:
            return self.count_max_tokens
        return DIALECT_COUNTS_MAX_TOKENS[self.dialect]


@dataclass
class Reply:
    """A successful completion. ``tool_calls`` items: ``{"name", "arguments"}`` (arguments a JSON
    string or a dict), optionally ``"id"``; the OpenAI ``{"id","type","function":{...}}`` shape is
    accepted too. Ids default to ``call_<n>`` (n counts up per simulator)."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None  # default: "tool_calls" if tool_calls else "stop"
    completion_tokens: int | None = None  # default: counted from content + tool calls
    prompt_tokens: int | None = None  # override the reported usage.prompt_tokens
    reasoning_content: str | None = None  # optional extra field (DeepSeek/vLLM style)
    chunk_delay_s: float | None = None  # per-chunk delay override for streams


@dataclass
class Fail:
    """Answer with ``status`` and a JSON ``body`` (dict/list), a raw str/bytes body, or no body
    (``body=None``). Default body: an OpenAI ``server_error`` envelope."""

    status: int = 500
    body: Any = field(
        default_factory=lambda: {
            "error": {
                "message": _SERVER_ERROR,
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    )
    headers: dict[str, str] | None = None

    def encoded(self) -> tuple[bytes, str]:
        if self.body is None:
            return b"", "application/json"
        if isinstance(self.body, bytes):
            return self.body, "application/json"
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode(), "application/json"


@dataclass
class Hang:
    """Stall for ``seconds`` then answer with ``then`` (default responder when None).
    With ``after_chunks`` set and a streaming request: send that many chunks first, then stall
    mid-stream. A client that disconnects, or ``stop()``, ends the stall early."""

    seconds: float = 30.0
    then: Reply | Fail | None = None
    after_chunks: int | None = None


@dataclass
class Disconnect:
    """Close the TCP connection abruptly. Streaming: 200 headers + ``after_chunks`` data events,
    then close (no ``[DONE]``, incomplete chunked body). Non-streaming: close without any
    response."""

    after_chunks: int = 0
    reply: Reply | None = None  # content for the partial stream (default responder when None)


@dataclass
class StreamError:
    """Streaming: send ``after_chunks`` chunks, then one ``data: {"error": {...}}`` event and end
    the body (no ``[DONE]``) — the mid-stream error shape OpenAI uses after a 200.
    Non-streaming: a 500 with that error."""

    after_chunks: int = 1
    error: dict[str, Any] = field(
        default_factory=lambda: {
            "message": _SERVER_ERROR,
            "type": "server_error",
            "param": None,
            "code": None,
        }
    )
    reply: Reply | None = None


Behaviour = Reply | Fail | Hang | Disconnect | StreamError


@dataclass
class Received:
    """One request as the simulator received it (header names lower-cased; ``at`` is
    time.monotonic())."""

    path: str
    method: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    prompt_tokens: int | None
    at: float
    is_summary: bool = False
    problems: list[str] = field(default_factory=list)  # tool-pairing violations found in messages
    status: int | None = None  # HTTP status sent (None: connection dropped / not answered yet)
    outcome: str = "pending"  # reply|overflow|fail|hang|disconnect|stream_error|client_gone|...
    usage: dict[str, Any] | None = None  # the usage a Messages answer reported (cache figures)

    @property
    def model(self) -> str | None:
        m = self.body.get("model") if isinstance(self.body, dict) else None
        return m if isinstance(m, str) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages") if isinstance(self.body, dict) else None
        return msgs if isinstance(msgs, list) else []

    @property
    def stream(self) -> bool:
        return bool(isinstance(self.body, dict) and self.body.get("stream"))

    @property
    def is_chat(self) -> bool:
        return self.path.rstrip("/").endswith("/chat/completions")

    @property
    def is_messages(self) -> bool:
        """A Messages API turn (``/v1/messages``; count_tokens is not one)."""
        return self.path.rstrip("/").endswith("/messages")

    @property
    def is_responses(self) -> bool:
        norm = self.path.rstrip("/")
        return norm.endswith("/responses") or "/responses/" in norm
