"""Money beside tokens: each arm's prompt tokens priced with cache tiers (pure).

A request's tokens shared with the previous request of its arm (`cached_prefix`) are what a
prompt cache serves; the rest are new. Priced two ways, with the default prices
(`DEFAULT_PRICES`) of session/config/prices.py:
OpenAI-style (gpt-4.1: cached input at 25%, new tokens at the input price)
and Anthropic-style (claude-sonnet-4: cache reads at 10%, new tokens written to the cache at
125%, as a client with a breakpoint at the end of its prompt pays). Summary calls are never
cached. Output tokens are left out: every arm replays the same answers. The per-request
automatic-caching minimum (1,024 tokens, 128-token steps) is not applied: the replay keeps
sums, not each request's prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.evaluation.runner import EvalResults
from bench.evaluation.tables import share, table
from session.config.prices import DEFAULT_PRICES, Price
from session.ledger.tiers import Split, cost


def _price(model: str) -> Price:
    return next(p for p in DEFAULT_PRICES if p.matches(model))


@dataclass(frozen=True, slots=True)
class Style:
    name: str
    price: Price
    writes: bool  # new prefix tokens are billed as cache writes


STYLES = (
    Style("OpenAI-style (gpt-4.1)", _price("gpt-4.1"), writes=False),
    Style("Anthropic-style (claude-sonnet-4)", _price("claude-sonnet-4"), writes=True),
)


def prompt_split(prompt: int, cached: int, summary: int, writes: bool) -> Split:
    """Requests of `prompt` tokens (summary calls excluded), `cached` of them a prefix the
    previous request had sent, plus `summary` tokens of summary calls."""
    new = max(0, prompt - cached)
    if writes:
        return Split(uncached=summary, cache_read=cached, cache_write=new)
    return Split(uncached=new + summary, cache_read=cached)


def usd(prompt: int, cached: int, summary: int, style: Style) -> float:
    return cost(prompt_split(prompt, cached, summary, style.writes), style.price)


@dataclass(frozen=True, slots=True)
class Pooled:
    """One arm's sums over the sessions of a window, with the baselines of those sessions."""

    sessions: int
    billed: int
    summary: int
    cached: int
    full: int
    full_cached: int
    masking: int
    masking_cached: int


def pooled(results: EvalResults, arm: str, window: int) -> Pooled | None:
    found = [s for s in results.sessions if s.window == window and arm in s.arms]
    if not found:
        return None
    arms = [s.arms[arm] for s in found]
    return Pooled(
        len(found),
        sum(a.billed for a in arms),
        sum(a.billed_summary for a in arms),
        sum(a.cached_prefix for a in arms),
        sum(s.full.total for s in found),
        sum(s.full.cached_prefix for s in found),
        sum(s.masking.total for s in found),
        sum(s.masking.cached_prefix for s in found),
    )


def money_table(results: EvalResults) -> list[str]:
    """Per arm and window: prompt tokens and their price against the full history's."""
    header = ["arm", "window", "sessions", "billed / full history (tokens)"]
    for style in STYLES:
        header += [f"{style.name}: ctxgate / full history", "masking M=10"]
    rows = []
    for arm in results.config.arms:
        for window in results.config.windows:
            p = pooled(results, arm, window)
            if p is None:
                continue
            cells = [arm, f"{window // 1024}K", p.sessions, share(p.billed, p.full)]
            for style in STYLES:
                ours = usd(p.billed - p.summary, p.cached, p.summary, style)
                full = usd(p.full, p.full_cached, 0, style)
                masked = usd(p.masking, p.masking_cached, 0, style)
                cells += [
                    f"${ours:.2f} / ${full:.2f} ({_ratio(ours, full)})",
                    f"${masked:.2f} ({_ratio(masked, full)})",
                ]
            rows.append(cells)
    return table(header, rows)


def _ratio(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


MONEY_NOTE = (
    "Each arm's prompt tokens priced with cache tiers (bench/evaluation/money.py): tokens a "
    "request shares with the previous one are cache reads, the rest new (OpenAI-style: at the "
    "input price; Anthropic-style: cache writes at 125%); summary calls are never cached; "
    "output tokens, the same in every arm, are left out. A compression rewrites the prefix, so "
    "the tokens saved can be a smaller saving in money."
)
