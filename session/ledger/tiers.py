"""Billing tiers of one call, their price, and the full-history counterfactual (pure).

A provider bills a prompt in up to three tiers: tokens it processed afresh, tokens it read from
its prompt cache, and (Anthropic) tokens it wrote to that cache; output is a fourth. ctxgate's
compressions rewrite the prefix a cache holds, so the request after one pays fresh or
cache-write prices where the uncompressed history would have read its stable prefix from the
cache: `full_history_split` says what that history would have been billed, turn by turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from session.config.prices import Price
from session.ports.frontdoor import Usage

PER = 1_000_000  # prices are per million tokens

# How a provider caches a prompt's prefix:
# - "automatic" (OpenAI, Gemini): a prompt of 1,024 tokens or more has the longest cached
#   prefix read at the cached price, in 128-token steps; nothing extra for writing it;
# - "explicit" (Anthropic, with the client's cache_control breakpoints): the prefix up to the
#   breakpoint is read at the cached price, the rest written at the cache-write price;
# - "none": every prompt token is fresh.
Caching = Literal["automatic", "explicit", "none"]
AUTOMATIC_MIN = 1024
AUTOMATIC_STEP = 128
CACHE_TTL_S = 300.0  # both providers' default: a prefix not used for 5 minutes is gone


@dataclass(frozen=True, slots=True)
class Split:
    """One call's tokens by billing tier."""

    uncached: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    @property
    def prompt(self) -> int:
        return self.uncached + self.cache_read + self.cache_write

    def __add__(self, other: Split) -> Split:
        return Split(
            self.uncached + other.uncached,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.output + other.output,
        )

    def as_json(self) -> dict[str, int]:
        return {
            "uncached": self.uncached,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
            "prompt": self.prompt,
        }


def split_of(usage: Usage) -> Split:
    """The tiers of a provider's usage; `prompt_tokens` counts all three prompt tiers."""
    read = max(0, usage.cache_read)
    write = max(0, usage.cache_write)
    return Split(
        uncached=max(0, usage.prompt_tokens - read - write),
        cache_read=read,
        cache_write=write,
        output=usage.completion_tokens or 0,
    )


def cost(split: Split, price: Price) -> float:
    """US dollars for `split` at `price`."""
    return (
        split.uncached * price.input
        + split.cache_read * price.cached_input
        + split.cache_write * price.cache_write
        + split.output * price.output
    ) / PER


def caching_of(api: str, billed: Split, provider_caches: bool) -> Caching:
    """How the provider cached this request, read from the API and its usage: Anthropic caches
    only where the client asked (its usage shows a cache tier then); OpenAI-shaped APIs cache
    by themselves, when the provider does (`provider_caches`: it has reported cached tokens for
    the model): a server that never caches is not credited with a cache it does not have."""
    if api == "messages":
        return "explicit" if billed.cache_read or billed.cache_write else "none"
    return "automatic" if provider_caches else "none"


def full_history_split(previous: int | None, full: int, output: int, caching: Caching) -> Split:
    """What the uncompressed history of `full` prompt tokens would have been billed, when the
    session's previous uncompressed prompt (`previous` tokens, None: none within the cache's
    life) is its stable prefix: the history only grows, so that prompt is a prefix of this one.
    The output is the call's own: the counterfactual answers at the same length."""
    prefix = min(previous or 0, full)
    if caching == "explicit":
        return Split(0, prefix, full - prefix, output)
    if caching == "automatic":
        cached = prefix // AUTOMATIC_STEP * AUTOMATIC_STEP if prefix >= AUTOMATIC_MIN else 0
        return Split(full - cached, cached, 0, output)
    return Split(full, 0, 0, output)
