"""The built-in compressor's options: each one's default and check, written once here.

`CompressorOptions.from_mapping` is the one check: the config reader runs it on the file's
values at start-up (an unknown key, a wrong type or an out-of-range value stops it with a
message naming the key, never a request), a caller handing `load_engine` a mapping runs it
there. A `CompressorOptions` built from it travels on as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

FAILURE_CLASSES = ("auth", "network", "empty", "truncated", "overload", "timeout", "other")

# Seconds of summary cooldown per failure class; a ladder escalates with repeated failures.
DEFAULT_COOLDOWNS: dict[str, tuple[float, ...]] = {
    "auth": (600.0,),
    "network": (60.0, 300.0),
    "empty": (30.0, 300.0),
    "truncated": (60.0, 300.0, 900.0),
    "overload": (60.0, 300.0, 900.0),
    "timeout": (60.0, 300.0, 900.0),
    "other": (60.0,),
}

TAIL_MODES = ("lean", "legacy")

# Options that no longer exist, and the one that took their place: a config still naming one
# fails at start-up saying what to write instead.
REPLACED = {
    "max_user_messages_carried": "user_share",
    "max_user_tokens_carried": "user_share",
}


@dataclass(frozen=True, slots=True)
class CompressorOptions:
    # The string under an option the config sets on `compression` itself is its description in
    # the configuration reference that scripts/config_reference.py writes into
    # docs/configuration-reference.md.
    threshold: float = 0.50
    """Agent threshold as a share of the effective window (context minus output reservation),
    with a 64K-token floor capped at 85% of that window."""
    min_threshold_tokens: int = 64_000
    threshold_tokens: int | None = None
    hygiene_threshold: float = 0.85
    """Share of the context length at which a request is compressed on arrival, even during a
    summary cooldown."""
    hygiene_max_messages: int = 5000
    """Message count at which a request is compressed on arrival."""
    protect_first_n: int = 3
    protect_last_n: int = 8
    tail_mode: str = "lean"
    tail_ratio: float = 0.20  # legacy mode: tail budget as a share of the threshold
    summary_ratio: float = 0.20
    summary_min_tokens: int = 2000
    summary_max_tokens: int = 10_000
    summary_context_fraction: float = 0.05
    summary_model: str | None = None
    summary_model_context_length: int | None = None
    summary_input_max_tokens: int = 32_000
    summary_message_max_chars: int = 6000
    summary_timeout: float | None = None
    abort_on_summary_failure: bool = False
    user_share: float = 0.50  # of the threshold, most the user's carried messages may take
    file_share: float = 0.30  # of the threshold, most the newest reads of files may take
    max_anchor_tokens: int = 1500
    duplicate_min_chars: int = 200
    prune_min_chars: int = 200
    tool_args_max_chars: int = 500
    keep_images: int = 3
    pin_share: float = 0.50  # of the threshold, most pinned content may take verbatim
    pin_paste_tokens: int = 1500  # a user message this large is pinned as pasted material (0: off)
    cooldowns: Mapping[str, tuple[float, ...]] = field(
        default_factory=lambda: dict(DEFAULT_COOLDOWNS)
    )

    @classmethod
    def from_mapping(
        cls, options: Mapping[str, Any] | None, key: Callable[[str], str] | None = None
    ) -> CompressorOptions:
        """Options checked: an unknown name, a wrong type or an out-of-range value raises
        ValueError. `key` names an option (its dotted name) in the message the way its caller
        knows it, e.g. by its config key (`KEY: problem`); without it the message says
        `compressor option 'NAME' problem`."""
        try:
            return cls(**_checked(options or {}))
        except _OptionError as error:
            raise ValueError(error.message(key)) from None


class _OptionError(Exception):
    """One option's problem, worded apart from the option's name so each caller names it its
    own way; `plain` is the message for callers that do not (when `NAME problem` reads badly)."""

    def __init__(self, name: str, problem: str, plain: str | None = None) -> None:
        super().__init__(name, problem)
        self.name = name
        self.problem = problem
        self.plain = plain or f"compressor option {name!r} {problem}"

    def message(self, key: Callable[[str], str] | None) -> str:
        return self.plain if key is None else f"{key(self.name)}: {self.problem}"


def _checked(options: Mapping[str, Any]) -> dict[str, Any]:
    allowed = [item.name for item in fields(CompressorOptions)]
    unknown = sorted(set(options) - set(allowed))
    for name in unknown:
        if name in REPLACED:
            raise _OptionError(name, f"was replaced by {REPLACED[name]!r}")
    if unknown:
        raise _OptionError(
            unknown[0],
            f"unknown option; allowed: {', '.join(allowed)}",
            f"unknown compressor option {unknown[0]!r}; allowed: {', '.join(allowed)}",
        )
    return {name: _validate(name, value) for name, value in options.items()}


_FRACTIONS = {
    "threshold",
    "hygiene_threshold",
    "tail_ratio",
    "summary_ratio",
    "summary_context_fraction",
    "pin_share",
    "user_share",
    "file_share",
}
_OPTIONAL_INTS = {"threshold_tokens", "summary_model_context_length"}
_POSITIVE_INTS = {
    "min_threshold_tokens",
    "hygiene_max_messages",
    "summary_min_tokens",
    "summary_max_tokens",
    "summary_input_max_tokens",
    "summary_message_max_chars",
    "duplicate_min_chars",
    "prune_min_chars",
    "tool_args_max_chars",
}
_COUNTS = {
    "protect_first_n",
    "protect_last_n",
    "max_anchor_tokens",
    "keep_images",
    "pin_paste_tokens",
}


def _validate(name: str, value: Any) -> Any:
    if name in _FRACTIONS:
        return _number(name, value, low=0.0, high=1.0, low_open=True)
    if name in _OPTIONAL_INTS:
        return None if value is None else _integer(name, value, minimum=1)
    if name in _POSITIVE_INTS:
        return _integer(name, value, minimum=1)
    if name in _COUNTS:
        return _integer(name, value, minimum=0)
    if name == "tail_mode":
        if value not in TAIL_MODES:
            raise _OptionError(name, f"must be one of {TAIL_MODES}")
        return value
    if name == "summary_model":
        if value is not None and not isinstance(value, str):
            raise _OptionError(name, "must be a model name or null")
        return value
    if name == "summary_timeout":
        return None if value is None else _number(name, value, low=0.0, low_open=True)
    if name == "abort_on_summary_failure":
        if not isinstance(value, bool):
            raise _OptionError(name, "must be true or false")
        return value
    return _cooldowns(value)


def _number(
    name: str, value: Any, *, low: float, high: float | None = None, low_open: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _OptionError(name, f"must be a number, got {value!r}")
    too_low = value <= low if low_open else value < low
    if too_low or (high is not None and value > high):
        raise _OptionError(name, f"must be {_bounds(low, high, low_open)}, got {value!r}")
    return float(value)


def _bounds(low: float, high: float | None, low_open: bool) -> str:
    if high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    return f"{'>' if low_open else '>='} {low:g}"


def _integer(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _OptionError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _cooldowns(value: Any) -> dict[str, tuple[float, ...]]:
    if not isinstance(value, Mapping):
        raise _OptionError("cooldowns", "must map failure classes to seconds")
    table = dict(DEFAULT_COOLDOWNS)
    for key, seconds in value.items():
        name = f"cooldowns.{key}"
        if key not in FAILURE_CLASSES:
            allowed = ", ".join(FAILURE_CLASSES)
            raise _OptionError(
                name,
                f"unknown failure class; allowed: {allowed}",
                f"unknown failure class {key!r} in 'cooldowns'; allowed: {allowed}",
            )
        ladder = seconds if isinstance(seconds, list | tuple) else [seconds]
        if not ladder:
            raise _OptionError(
                name, "needs at least one duration", f"{name!r} needs at least one duration"
            )
        table[key] = tuple(_number(name, s, low=0.0) for s in ladder)
    return table
