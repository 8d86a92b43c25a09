"""When to compress: one pure function from an event to an action.

    action = decide(event, limits, state, now=..., rules=Rules(...))

Events are what happens to a session: a request arrives, an answer reports its real prompt
size, the provider refuses a request as too large, an operator asks for a compression. A
session whose compression is switched off is never compressed on a request's way in (its
view is the client's messages, with no checkpoint applied), nor after an answer, nor to
recover from an overflow: the provider's error reaches the client. An operator's explicit
compression still runs; its checkpoint serves once compression is switched back on. The
action says what the caller does next; the caller does the I/O and reports the outcome as the
next event, never by changing what was decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from compression import EngineState, Limits, Trigger, blocked_reason
from session.overflow import Overflow

# A lowered max_tokens below this leaves no room for an answer worth having.
MIN_MAX_TOKENS = 16
# Why a session's request is relayed as its client sent it: compression is switched off for
# the session (a request header or the admin API; see proxy/gateway/switches.py).
COMPRESSION_OFF = "compression is off for this session"
# Windows tried, largest first, when a provider refuses a prompt without saying its limit.
PROBE_TIERS = (256_000, 128_000, 64_000, 32_000, 16_000, 8_000, 4_000, 2_000, 1_000)


@dataclass(frozen=True, slots=True)
class Rules:
    """The settings the decisions depend on."""

    background: bool  # compress after a response crosses the threshold, not before forwarding
    max_attempts: int  # forced compressions per request after overflow errors


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request arrived; `tokens` is its view's size, None when a cheap bound showed it is far
    under every line."""

    tokens: int | None
    exact: bool  # `tokens` is anchored on the provider's real figure for an earlier view
    messages: int
    pending: bool  # the session's last compression still awaits its first real figure
    job_running: bool  # a background compression of the session is under way
    after_job: bool = False  # decided again after waiting for that compression


@dataclass(frozen=True, slots=True)
class Answered:
    """The provider answered and billed `prompt_tokens`."""

    prompt_tokens: int
    compressed_now: bool  # this request was compressed on its way in
    superseded: bool  # a newer compression of the session was committed meanwhile
    job_running: bool
    compression_off: bool = False  # switched off for the session: its requests go verbatim


@dataclass(frozen=True, slots=True)
class Refused:
    """The provider refused the request as too large."""

    overflow: Overflow
    attempts: int  # forced compressions already made for this request
    max_tokens: int | None  # the request's output reservation
    compression_off: bool = False  # the client's error is relayed: nothing is rewritten


@dataclass(frozen=True, slots=True)
class Asked:
    """An operator asked for a compression (the manual API)."""

    focus: str | None


Event = Arrival | Answered | Refused | Asked


@dataclass(frozen=True, slots=True)
class Nothing:
    reason: str


@dataclass(frozen=True, slots=True)
class Compress:
    trigger: Trigger
    force: bool = False
    current_tokens: int | None = None
    focus: str | None = None
    background: bool = False  # after the answer, without the client waiting


@dataclass(frozen=True, slots=True)
class AwaitJob:
    """Wait (bounded) for the session's running compression, then decide again."""


@dataclass(frozen=True, slots=True)
class LowerMaxTokens:
    max_tokens: int


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str


Action = Nothing | Compress | AwaitJob | LowerMaxTokens | GiveUp


def decide(event: Event, limits: Limits, state: EngineState, *, now: float, rules: Rules) -> Action:
    if isinstance(event, Arrival):
        return _on_arrival(event, limits, state, now, rules)
    if isinstance(event, Answered):
        return _on_answer(event, limits, state, now, rules)
    if isinstance(event, Refused):
        return _on_refusal(event, rules)
    return Compress("manual", force=True, focus=event.focus)


def _on_arrival(
    event: Arrival, limits: Limits, state: EngineState, now: float, rules: Rules
) -> Action:
    if state.requested_at:
        return Compress("manual", force=True, focus=state.requested_focus)
    tokens = event.tokens
    if event.messages >= limits.hygiene_messages or (
        tokens is not None and tokens >= limits.hygiene_tokens
    ):
        if event.job_running and not event.after_job:
            return AwaitJob()
        return Compress("hygiene", current_tokens=tokens)
    if tokens is None or tokens < limits.threshold:
        return Nothing("under the threshold")
    if event.pending:
        # Right after a compression the estimate defers to the coming real figure: this keeps
        # estimate error from starting a compress loop. Hygiene above still guards the window.
        return Nothing("awaiting the real figure of the last compression")
    if (rules.background or event.after_job) and event.exact:
        # A session with a real figure is compressed after its response, in the background,
        # so the client never waits; hygiene above still guards the window meanwhile.
        return Nothing("left to the background compression")
    blocked = blocked_reason(state, now)
    if blocked is not None:
        return Nothing(blocked)
    return Compress("preflight", current_tokens=tokens)


def _on_answer(
    event: Answered, limits: Limits, state: EngineState, now: float, rules: Rules
) -> Action:
    if event.compression_off:
        return Nothing(COMPRESSION_OFF)
    if event.compressed_now or event.superseded:
        # Compressed on the way in (its real figure judges it), or the view predates a newer
        # compression of the session: compressing it again would thrash.
        return Nothing("already compressed")
    if not rules.background or event.prompt_tokens < limits.threshold:
        return Nothing("under the threshold")
    if event.job_running:
        return Nothing("a compression is under way")
    blocked = blocked_reason(state, now)
    if blocked is not None:
        return Nothing(blocked)
    return Compress("post_response", current_tokens=event.prompt_tokens, background=True)


def _on_refusal(event: Refused, rules: Rules) -> Action:
    if event.compression_off:
        # Verbatim means verbatim: no compression, no lowered max_tokens either.
        return GiveUp(COMPRESSION_OFF)
    if event.attempts >= rules.max_attempts:
        return GiveUp(f"still too large after {event.attempts} forced compressions")
    overflow = event.overflow
    requested = event.max_tokens
    if requested and overflow.window and overflow.prompt_tokens is not None:
        room = overflow.window - overflow.prompt_tokens
        if MIN_MAX_TOKENS <= room < requested:
            # The prompt fits; the answer's reservation does not. Leave a small margin.
            return LowerMaxTokens(room - max(1, room // 50))
    return Compress("overflow", force=True, current_tokens=overflow.prompt_tokens)


def probed_window(failing_tokens: int, context_length: int) -> int | None:
    """The window to assume after a refusal that states none: the largest probe tier under
    the size that failed, when that is below the window assumed so far. Later requests then
    aim under it at once instead of each overflowing first."""
    for tier in PROBE_TIERS:
        if tier < failing_tokens:
            return tier if tier < context_length else None
    return None
