"""When to compress and how big the pieces of a compressed view may be (pure arithmetic).

    W = context_length - max_output_tokens        (W <= 0: W = context_length)
    T = max(int(W * threshold), min_threshold_tokens), the floor never pushed past 85 % of W
    T = min(T, threshold_tokens)                   (optional absolute cap)

A 128K model compresses at 64,000 tokens; a 32K model at int(0.85 * W).
"""

from __future__ import annotations

from dataclasses import dataclass

from compression.options import CompressorOptions

FLOOR_CAP_RATIO = 0.85
TAIL_MAX_CONTEXT_SHARE = 0.20
LEAN_TAIL_SHARE = 0.025
LEAN_TAIL_MIN = 10_000
LEAN_TAIL_MAX = 25_000


@dataclass(frozen=True, slots=True)
class Limits:
    """The figures a caller needs to decide when to call the engine."""

    context_length: int
    window: int  # context length minus the output reservation
    threshold: int  # agent threshold: compress at or above this many prompt tokens
    hygiene_tokens: int  # gateway hygiene line (tokens)
    hygiene_messages: int  # gateway hygiene line (message count)


def effective_window(context_length: int, max_output_tokens: int | None) -> int:
    window = context_length - (max_output_tokens or 0)
    return window if window > 0 else context_length


def agent_threshold(
    window: int, options: CompressorOptions, context_length: int | None = None
) -> int:
    """Compress at or above this many prompt tokens (`context_length` bounds the optional cap)."""
    proportional = int(window * options.threshold)
    floor_tokens = options.min_threshold_tokens
    threshold = max(proportional, floor_tokens)
    ceiling = max(1, min(int(window * FLOOR_CAP_RATIO), window - 1))
    if threshold > ceiling and floor_tokens > proportional:
        # The floor exists so large windows do not compress early; it must not push small
        # windows to the brink, where estimate error alone overflows them.
        threshold = max(proportional, ceiling)
    if threshold >= window:
        threshold = ceiling
    cap = options.threshold_tokens
    if cap is not None and cap > 0:
        threshold = min(threshold, min(cap, context_length or cap))
    return max(1, threshold)


def hygiene_tokens(context_length: int, ratio: float) -> int:
    return max(1, int(context_length * ratio))


def limits_for(
    options: CompressorOptions, context_length: int, max_output_tokens: int | None
) -> Limits:
    window = effective_window(context_length, max_output_tokens)
    return Limits(
        context_length=context_length,
        window=window,
        threshold=agent_threshold(window, options, context_length),
        hygiene_tokens=hygiene_tokens(context_length, options.hygiene_threshold),
        hygiene_messages=options.hygiene_max_messages,
    )


def hygiene_due(tokens: int, message_count: int, limits: Limits) -> bool:
    """Gateway hygiene: checked on arrival, before anything else, even during cooldowns."""
    return tokens >= limits.hygiene_tokens or message_count >= limits.hygiene_messages


def tail_budget(options: CompressorOptions, context_length: int, threshold: int) -> int:
    """Tokens of recent messages kept verbatim (lean: 2.5 % of the window, 10K..25K)."""
    if options.tail_mode == "legacy":
        budget = int(threshold * options.tail_ratio)
    else:
        budget = int(context_length * LEAN_TAIL_SHARE)
        budget = min(max(budget, LEAN_TAIL_MIN), LEAN_TAIL_MAX)
    return max(1, min(budget, int(context_length * TAIL_MAX_CONTEXT_SHARE)))


def summary_budget(options: CompressorOptions, tokens_summarized: int, context_length: int) -> int:
    """max(2000, min(0.20 x tokens summarized, min(5 % of context, 10000)))."""
    ceiling = min(
        int(context_length * options.summary_context_fraction), options.summary_max_tokens
    )
    return max(
        options.summary_min_tokens, min(int(tokens_summarized * options.summary_ratio), ceiling)
    )
