"""Per-session engine memory and the pure transitions between its values.

Everything that must outlive one request (previous summary, cooldowns, strikes, backoffs)
lives in `EngineState`. The caller loads it, passes it in, and persists the state the engine
returns; no transition mutates its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

STRIKES_TO_BLOCK = 2
ANTI_THRASH_SECONDS = 300.0
NOOP_BACKOFF_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class EngineState:
    """Per-session engine memory, persisted by the caller as JSON (`to_json`/`from_json`)."""

    previous_summary: str | None = None
    compression_count: int = 0
    cooldown_until: float = 0.0
    cooldown_reason: str | None = None
    failure_streak: dict[str, int] = field(default_factory=dict)
    strikes: int = 0
    blocked_until: float = 0.0
    noop_until: float = 0.0
    last_tokens_after: int | None = None
    awaiting_usage: bool = False  # a compression was committed; its real-usage verdict is due
    # The summary model's tokens per counted token, learned from its replies' usage
    # (`Calibration.to_dict()`), so the next summary prompt is sized for its tokenizer.
    summary_calibration: dict[str, Any] | None = None
    # An operator asked for a compression that could not run at once (the caller did not hold
    # the session's latest view): the next request runs it, wherever it is served.
    requested_at: float = 0.0
    requested_focus: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {item.name: getattr(self, item.name) for item in fields(self)}
        data["failure_streak"] = dict(self.failure_streak)
        if self.summary_calibration is not None:
            data["summary_calibration"] = dict(self.summary_calibration)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> EngineState:
        """Tolerant reader: unknown keys and values of the wrong type fall back to defaults."""
        if not data:
            return cls()
        default = cls()
        values: dict[str, Any] = {}
        for item in fields(cls):
            if item.name in data:
                values[item.name] = _coerce(item.name, data[item.name], getattr(default, item.name))
        return cls(**values)


def _coerce(name: str, value: Any, default: Any) -> Any:
    if name == "failure_streak":
        if not isinstance(value, Mapping):
            return {}
        return {str(k): int(v) for k, v in value.items() if isinstance(v, int | float)}
    if name == "summary_calibration":
        return dict(value) if isinstance(value, Mapping) else None
    if name in ("previous_summary", "cooldown_reason", "requested_focus"):
        return value if isinstance(value, str) else None
    if name == "last_tokens_after":
        return int(value) if isinstance(value, int | float) and value is not True else None
    if name == "awaiting_usage":
        return bool(value) if isinstance(value, bool) else default
    if isinstance(default, float):
        return float(value) if isinstance(value, int | float) else default
    if isinstance(default, int):
        return int(value) if isinstance(value, int | float) else default
    return default


def blocked_reason(state: EngineState, now: float) -> str | None:
    """Why an automatic compression must not run now, or None when it may."""
    if state.cooldown_until > now:
        reason = state.cooldown_reason or "summary failure"
        return f"summary cooldown after a {reason} failure ({state.cooldown_until - now:.0f}s left)"
    if state.strikes >= STRIKES_TO_BLOCK and state.blocked_until > now:
        left = state.blocked_until - now
        return f"anti-thrash: compressions did not get under the threshold ({left:.0f}s left)"
    if state.noop_until > now:
        return f"nothing to compress recently ({state.noop_until - now:.0f}s backoff left)"
    return None


def start_attempt(state: EngineState) -> EngineState:
    """An attempt after an anti-thrash block is the one probe: a further strike re-blocks."""
    if state.strikes >= STRIKES_TO_BLOCK:
        return replace(state, strikes=STRIKES_TO_BLOCK - 1, blocked_until=0.0)
    return state


def with_strike(state: EngineState, now: float) -> EngineState:
    strikes = state.strikes + 1
    blocked = now + ANTI_THRASH_SECONDS if strikes >= STRIKES_TO_BLOCK else state.blocked_until
    return replace(state, strikes=strikes, blocked_until=blocked)


def record_real_usage(
    state: EngineState, prompt_tokens: int, threshold: int, now: float
) -> EngineState:
    """Fold the real prompt tokens of the next response into the anti-thrash verdict.

    The first real figure after a committed compression judges it: still over the threshold is
    a strike (two block automatic compression for 300 s). Any reading under the threshold
    clears the strikes.
    """
    if prompt_tokens < threshold:
        if state.strikes == 0 and not state.awaiting_usage:
            return state
        return replace(state, strikes=0, blocked_until=0.0, awaiting_usage=False)
    if state.awaiting_usage:
        return replace(with_strike(state, now), awaiting_usage=False)
    return state


def with_failure(
    state: EngineState, failure_class: str, cooldown_seconds: float, now: float
) -> EngineState:
    streak = dict(state.failure_streak)
    streak[failure_class] = streak.get(failure_class, 0) + 1
    return replace(
        state,
        cooldown_until=now + cooldown_seconds,
        cooldown_reason=failure_class,
        failure_streak=streak,
    )


def with_committed(state: EngineState, summary: str | None, tokens_after: int) -> EngineState:
    """State after a compression was committed (model or fallback summary)."""
    return replace(
        state,
        previous_summary=summary,
        compression_count=state.compression_count + 1,
        noop_until=0.0,
        last_tokens_after=tokens_after,
        awaiting_usage=True,
    )


def with_summary_success(state: EngineState) -> EngineState:
    return replace(state, cooldown_until=0.0, cooldown_reason=None, failure_streak={})


def with_noop(state: EngineState, now: float) -> EngineState:
    return replace(state, noop_until=now + NOOP_BACKOFF_SECONDS)


def without_foreign_summary(state: EngineState, view_summaries: list[str]) -> EngineState:
    """Forget a remembered summary that the incoming view does not contain.

    It then belongs to another conversation (a fork, an edit, a reused session id) and must
    not leak into this one.
    """
    if state.previous_summary is None or state.previous_summary in view_summaries:
        return state
    return replace(state, previous_summary=None)
