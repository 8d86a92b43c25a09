"""The context-engine contract: one async method, chosen by name in the config.

    engine = load_engine("compressor", options)      # or "passthrough", or "pkg.mod:Class"
    result = await engine.compress(messages, context)

The engine never sees HTTP, the database or the session lock. What must outlive a request
(previous summary, cooldowns, strikes, compression count) travels in `EngineState`: the caller
loads it, passes it in `CompressionContext.state`, and persists `CompressionResult.state`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from compression.messages.types import Message, ToolSchema
from compression.state import EngineState
from compression.thresholds import Limits

Outcome = Literal[
    "compressed",  # a shorter view was produced and may be committed
    "fallback",  # compressed with the deterministic fallback summary (summarizer failed)
    "noop",  # nothing to compress (structural no-op; backoff recorded in state)
    "skipped",  # not attempted: under threshold, cooldown or anti-thrash block
    "aborted",  # summarizer failure of an abort class; messages returned unchanged
    "rejected",  # result was not smaller / not under threshold; not committed (strike)
]

Trigger = Literal["hygiene", "preflight", "post_response", "overflow", "manual", "offline"]


class TokenCounter(Protocol):
    """Counts tokens the way the upstream would bill them (an estimate)."""

    def count_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None
    ) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_text(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class SummaryCall:
    """One request to the auxiliary model."""

    messages: list[Message]
    max_tokens: int
    model: str | None  # None = the caller's configured summary model


@dataclass(frozen=True, slots=True)
class SummaryReply:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class SummaryCallError(Exception):
    """Raised by a summarizer when the auxiliary call fails; the engine classifies it."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        timeout: bool = False,
        network: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.timeout = timeout
        self.network = network


Summarizer = Callable[[SummaryCall], Awaitable[SummaryReply]]


@dataclass(frozen=True, slots=True)
class CompressionContext:
    model: str
    context_length: int
    max_output_tokens: int | None  # the request's max_tokens, else the model's configured one
    counter: TokenCounter
    summarize: Summarizer | None
    state: EngineState = field(default_factory=EngineState)
    tools: Sequence[ToolSchema] | None = None
    trigger: Trigger = "preflight"
    force: bool = False  # ignore threshold and cooldowns (overflow recovery, manual, --force)
    focus: str | None = None
    current_tokens: int | None = None  # real/anchored figure for the view, if known
    now: float = 0.0  # seconds since epoch, injected so tests control time
    summary_context_length: int | None = None  # the summary model's window, if not the options'
    # The summary model's real tokens per counted token (its calibration), when the caller
    # knows it; the engine otherwise uses what it measured itself, or a safety margin.
    summary_token_ratio: float | None = None
    # The caller already decided the view is due (its threshold crossed): the engine does not
    # weigh the threshold again, only its own cooldowns.
    due: bool = False
    # The whole text of each user message the view's handoffs carry clipped, by the clip as
    # carried (`compression.summary.handles.clipped_originals`): the caller holds the client's
    # list, the engine only the view.
    originals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClippedMessage:
    """A message the result holds clipped (its head and tail), not verbatim: a pinned one, a
    file read or a user message the handoff carries (`kept_tokens` 0: not even clipped; its
    handle only)."""

    index: int  # its position in the view the engine was given
    kept_tokens: int
    original_tokens: int

    def __reduce__(self) -> tuple[type[ClippedMessage], tuple[int, int, int]]:
        # A pass in the pool sends tens of thousands back (every user message a long history's
        # handoff names by handle only): by value, not through the slots' slow setstate.
        return ClippedMessage, (self.index, self.kept_tokens, self.original_tokens)


@dataclass(frozen=True, slots=True)
class CompressionResult:
    messages: list[Message]
    outcome: Outcome
    state: EngineState
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    pruned: int = 0  # messages whose content was shortened by prune passes
    summarized: int = 0  # messages replaced by the summary
    # How many leading input messages the result no longer holds verbatim (to archive them).
    replaced_upto: int = 0
    error: str | None = None  # why a summary failed / why nothing was committed
    # The classified summary failure (auth, timeout, …); "invariant" marks an internal bug.
    failure_class: str | None = None
    # The model's summary stopped at its output limit and was kept up to its last complete line.
    summary_truncated: bool = False
    # Pinned messages (see `compression.verbatim.pins`) and carried user messages (see
    # `compression.verbatim.userwords`) the result holds clipped rather than verbatim.
    clipped: tuple[ClippedMessage, ...] = ()


class ContextEngine(Protocol):
    name: str

    async def compress(
        self, messages: Sequence[Message], ctx: CompressionContext
    ) -> CompressionResult: ...

    def limits(self, context_length: int, max_output_tokens: int | None) -> Limits:
        """When the caller should call `compress`: the thresholds for this window. (An engine
        loaded by import string without it gets the built-in figures from the config.)"""
        ...


__all__ = [
    "ClippedMessage",
    "CompressionContext",
    "CompressionResult",
    "ContextEngine",
    "EngineState",
    "Outcome",
    "Summarizer",
    "SummaryCall",
    "SummaryCallError",
    "SummaryReply",
    "TokenCounter",
    "Trigger",
]
