"""How full a request's view is, and which trigger that calls for.

The anchor is the real `prompt_tokens` the upstream reported for the session's previous view;
the figure for a new request is that anchor plus an estimate of what was appended since. Only
when there is no usable anchor is the whole view estimated (per-message counts are cached).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from compression.calibration import Calibration
from compression.engine import TokenCounter
from compression.state import blocked_reason
from compression.thresholds import Limits
from proxy.turn import Turn
from storage import PROMPT_TOKENS_PENDING

IMAGE_TOKENS = 765

Decision = Literal["none", "hygiene", "preflight"]


@dataclass(frozen=True, slots=True)
class Pressure:
    tokens: int
    exact: bool  # anchored on a real figure rather than a pure estimate


def upper_bound(turn: Turn) -> int:
    """A cheap bound on the request's tokens: a BPE token is never shorter than a byte.

    Images are the exception (a short URL costs hundreds of tokens), so each adds its flat cost.
    """
    raw = turn.request.raw
    return len(raw) + IMAGE_TOKENS * raw.count(b'"image_url"')


def estimate_view(turn: Turn, counter: TokenCounter, calibration: Calibration) -> int:
    if turn.estimate is None:
        raw = counter.count_messages(turn.view, turn.request.tools)
        turn.estimate = calibration.apply(raw)
    return turn.estimate


def measure(turn: Turn, counter: TokenCounter, calibration: Calibration) -> Pressure:
    session = turn.session
    if (
        session is not None
        and turn.anchored
        and session.last_prompt_tokens is not None
        and session.last_prompt_tokens > 0
        and session.last_message_count is not None
        and 0 < session.last_message_count <= len(turn.view)
        and not session.last_usage_estimated
    ):
        appended = turn.view[session.last_message_count :]
        extra = counter.count_messages(appended) - 3 if appended else 0
        return Pressure(session.last_prompt_tokens + calibration.apply(max(0, extra)), True)
    return Pressure(estimate_view(turn, counter, calibration), False)


def decide(
    turn: Turn,
    limits: Limits,
    counter: TokenCounter,
    calibration: Calibration,
    *,
    now: float,
    background: bool,
) -> tuple[Decision, Pressure | None]:
    """Which synchronous trigger, if any, fires on arrival."""
    if len(turn.view) >= limits.hygiene_messages:
        return "hygiene", None
    if turn.view is turn.request.messages and upper_bound(turn) < min(
        limits.threshold, limits.hygiene_tokens
    ):
        return "none", None
    pressure = measure(turn, counter, calibration)
    if pressure.tokens >= limits.hygiene_tokens:
        return "hygiene", pressure
    if pressure.tokens < limits.threshold:
        return "none", pressure
    pending = turn.session is not None and turn.session.last_prompt_tokens == PROMPT_TOKENS_PENDING
    if pending:
        # Right after a compression the estimate defers to the coming real figure: this keeps
        # estimate error from starting a compress loop. Hygiene above still guards the window.
        return "none", pressure
    if background and pressure.exact:
        # A session with a real figure is compressed after its response, in the background,
        # so the client never waits; hygiene above still guards the window meanwhile.
        return "none", pressure
    if blocked_reason(turn.state, now) is not None:
        return "none", pressure
    return "preflight", pressure
