"""What models' tokens cost: the `prices` list of the settings, and its defaults.

The ledger prices a request's tokens by the first entry whose glob matches its model; a model
no entry matches is reported in tokens only.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from session.config.reader import Reader, SettingsError


@dataclass(frozen=True, slots=True)
class Price:
    """What a model's tokens cost, in US dollars per million tokens; the first entry whose
    `match` fits the request's `model` applies. A model no entry matches is reported in tokens
    only, never priced by guess. Unset, the list holds the published prices of common OpenAI,
    Anthropic and Gemini models at the time of writing (`DEFAULT_PRICES` in
    session/config/prices.py); set it to replace them all, `[]` for tokens only."""

    match: str
    """Glob on the request's model name (`*`, `?`, `[...]`; case-sensitive)."""
    input: float
    """Uncached input tokens."""
    cached_input: float
    """Input tokens read from the provider's prompt cache; unset: the `input` price."""
    cache_write: float
    """Input tokens written to the prompt cache (Anthropic bills them above `input`); unset:
    the `input` price."""
    output: float
    """Output tokens (reasoning tokens included)."""

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.match)


def _p(match: str, inp: float, cached: float, write: float | None, out: float) -> Price:
    return Price(match, inp, cached, inp if write is None else write, out)


# Published list prices (USD per million tokens, standard tier, 5-minute cache writes, prompts
# under 200K tokens) when this table was written; providers change them: check and override.
DEFAULT_PRICES: tuple[Price, ...] = (
    _p("gpt-5-mini*", 0.25, 0.025, None, 2.00),
    _p("gpt-5-nano*", 0.05, 0.005, None, 0.40),
    _p("gpt-5*", 1.25, 0.125, None, 10.00),
    _p("gpt-4.1-mini*", 0.40, 0.10, None, 1.60),
    _p("gpt-4.1-nano*", 0.10, 0.025, None, 0.40),
    _p("gpt-4.1*", 2.00, 0.50, None, 8.00),
    _p("gpt-4o-mini*", 0.15, 0.075, None, 0.60),
    _p("gpt-4o*", 2.50, 1.25, None, 10.00),
    _p("o4-mini*", 1.10, 0.275, None, 4.40),
    _p("o3-mini*", 1.10, 0.55, None, 4.40),
    _p("o3*", 2.00, 0.50, None, 8.00),
    _p("o1*", 15.00, 7.50, None, 60.00),
    _p("claude-opus-4-5*", 5.00, 0.50, 6.25, 25.00),
    _p("claude-opus-4*", 15.00, 1.50, 18.75, 75.00),
    _p("claude-sonnet-4*", 3.00, 0.30, 3.75, 15.00),
    _p("claude-3-7-sonnet*", 3.00, 0.30, 3.75, 15.00),
    _p("claude-haiku-4*", 1.00, 0.10, 1.25, 5.00),
    _p("claude-3-5-haiku*", 0.80, 0.08, 1.00, 4.00),
    _p("gemini-2.5-pro*", 1.25, 0.125, None, 10.00),
    _p("gemini-2.5-flash*", 0.30, 0.03, None, 2.50),
)


def read_prices(root: Reader) -> tuple[Price, ...]:
    """The file's top-level `prices` list; unset: DEFAULT_PRICES."""
    root.used.add("prices")
    raw = root.data.get("prices")
    if raw is None:
        return DEFAULT_PRICES
    if not isinstance(raw, list):
        raise SettingsError("prices: expected a list of {match, input, output, ...}")
    prices = []
    for i, item in enumerate(raw):
        r = Reader(item, f"prices[{i}]")
        match = r.get("match", str, None)
        if not match:
            raise SettingsError(f"prices[{i}].match: required")
        tiers = {}
        for key in ("input", "output", "cached_input", "cache_write"):
            value = r.get(key, float, None)
            if value is None and key in ("input", "output"):
                raise SettingsError(f"prices[{i}].{key}: required (US dollars per million tokens)")
            if value is not None and value < 0:
                raise SettingsError(f"prices[{i}].{key}: must be 0 or more")
            tiers[key] = value
        inp, out, cached = tiers["input"], tiers["output"], tiers["cached_input"]
        assert inp is not None and out is not None
        prices.append(_p(match, inp, inp if cached is None else cached, tiers["cache_write"], out))
        r.done()
    return tuple(prices)
