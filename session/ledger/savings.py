"""Savings from recorded charges: tokens and money, per session, model and overall (pure).

Money is the billed tiers at the configured prices; the full-history figure is what the client's
uncompressed requests would have been billed (their counterfactual tiers, same output). Summary
calls, recall rounds and shadow calls are billed with no counterpart: without compression they
would not have happened, so they count against the savings. The figures say which is which:
`compression` is what compression saved, its own calls (summaries, recall rounds) counted
against it; `shadow_checks` is what the shadow checks spent measuring it (an operator's
choice, sampled, bounded by its own budget); `tokens_saved` and `usd_saved` are the net of
both. A model without a price adds its tokens and no money: its money figures are null, and
the overall money covers priced models only, naming the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from session.config.prices import Price
from session.ledger.tiers import Split, cost
from storage.rows.charges import ChargeGroup, ChargeRow

PriceFor = Callable[[str], Price | None]


@dataclass(frozen=True, slots=True)
class Ratio:
    hits: int = 0  # prompt tokens read from the cache
    prompt: int = 0

    @property
    def value(self) -> float | None:
        return self.hits / self.prompt if self.prompt else None


@dataclass(slots=True)
class Tally:
    """What a set of charges comes to; built by `tally`, read as JSON by `as_json`."""

    requests: int = 0
    billed: Split = Split()  # every call, overheads included
    full: Split = Split()  # the client requests' uncompressed counterfactual
    overhead: dict[str, Split] = field(default_factory=dict)  # summary, recall, shadow
    billed_usd: float | None = 0.0
    full_usd: float | None = 0.0
    overhead_usd: dict[str, float] = field(default_factory=dict)
    before: Ratio = Ratio()  # requests forwarded as the client sent them
    after: Ratio = Ratio()  # requests whose view a compression changed
    models: set[str] = field(default_factory=set)
    unpriced: set[str] = field(default_factory=set)

    def add(self, group: ChargeGroup, price: Price | None) -> None:
        billed = Split(group.uncached, group.cache_read, group.cache_write, group.output)
        self.billed += billed
        self.models.add(group.model)
        usd = cost(billed, price) if price is not None else None
        if price is None:
            self.unpriced.add(group.model)
        if group.kind == "request":
            self.requests += group.calls
            full = Split(
                group.full_uncached, group.full_cache_read, group.full_cache_write, group.output
            )
            self.full += full
            if price is not None:
                self.full_usd = (self.full_usd or 0.0) + cost(full, price)
            side = "after" if group.compressed else "before"
            ratio = getattr(self, side)
            setattr(self, side, Ratio(ratio.hits + billed.cache_read, ratio.prompt + billed.prompt))
        else:
            self.overhead[group.kind] = self.overhead.get(group.kind, Split()) + billed
            if usd is not None:
                self.overhead_usd[group.kind] = self.overhead_usd.get(group.kind, 0.0) + usd
        if usd is not None:
            self.billed_usd = (self.billed_usd or 0.0) + usd

    @property
    def priced(self) -> bool:
        return bool(self.models - self.unpriced)

    def as_json(self) -> dict[str, object]:
        """The figures; in tokens only when no model of them has a price (the money then
        covers the priced models, and `unpriced_models` names the others)."""
        billed_tokens = self.billed.prompt + self.billed.output
        full_tokens = self.full.prompt + self.full.output
        out: dict[str, object] = {
            "requests": self.requests,
            "billed_tokens": self.billed.as_json(),
            "full_history_tokens": self.full.as_json(),
            "overhead_tokens": {k: v.as_json() for k, v in sorted(self.overhead.items())},
            "tokens_saved": full_tokens - billed_tokens,
            "tokens_saved_ratio": _ratio(full_tokens - billed_tokens, full_tokens),
            "cache_hit_ratio_before": self.before.value,
            "cache_hit_ratio_after": self.after.value,
            "cache_hit_ratio_full_history": _ratio(self.full.cache_read, self.full.prompt),
        }
        shadow = self.overhead.get("shadow", Split())
        shadow_tokens = shadow.prompt + shadow.output
        compression: dict[str, object] = {
            "tokens_saved": full_tokens - billed_tokens + shadow_tokens,
            "tokens_saved_ratio": _ratio(full_tokens - billed_tokens + shadow_tokens, full_tokens),
            "usd_saved": None,
            "usd_saved_ratio": None,
        }
        checks: dict[str, object] = {"tokens": shadow_tokens, "usd": None}
        if self.priced:
            billed, full = self.billed_usd or 0.0, self.full_usd or 0.0
            shadow_usd = self.overhead_usd.get("shadow", 0.0)
            out |= {
                "billed_usd": billed,
                "full_history_usd": full,
                "overhead_usd": dict(sorted(self.overhead_usd.items())),
                "usd_saved": full - billed,
                "usd_saved_ratio": _ratio(full - billed, full),
            }
            compression |= {
                "usd_saved": full - billed + shadow_usd,
                "usd_saved_ratio": _ratio(full - billed + shadow_usd, full),
            }
            checks["usd"] = shadow_usd
        else:
            out |= dict.fromkeys(
                ("billed_usd", "full_history_usd", "overhead_usd", "usd_saved", "usd_saved_ratio")
            )
        return out | {
            "compression": compression,
            "shadow_checks": checks,
            "unpriced_models": sorted(self.unpriced),
        }


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def charge_json(row: ChargeRow, price: Price | None) -> dict[str, object]:
    """One call's charge: billed, and for a client request its full-history counterfactual."""
    billed = Split(row.uncached, row.cache_read, row.cache_write, row.output)
    out: dict[str, object] = {
        "at": row.at,
        "model": row.model,
        "kind": row.kind,
        "compressed": row.compressed,
        "billed_tokens": billed.as_json(),
        "billed_usd": None if price is None else cost(billed, price),
    }
    if row.kind == "request":
        full = Split(row.full_uncached, row.full_cache_read, row.full_cache_write, row.output)
        out |= {
            "full_history_tokens": full.as_json(),
            "full_history_usd": None if price is None else cost(full, price),
        }
    return out


def tally(groups: Iterable[ChargeGroup], price_for: PriceFor) -> Tally:
    out = Tally()
    for group in groups:
        out.add(group, price_for(group.model))
    return out


def savings_json(groups: Iterable[ChargeGroup], price_for: PriceFor) -> dict[str, object]:
    """The overall figures and one entry per model."""
    groups = list(groups)
    by_model: dict[str, list[ChargeGroup]] = defaultdict(list)
    for group in groups:
        by_model[group.model].append(group)
    total = tally(groups, price_for)
    return {
        "object": "savings",
        "total": total.as_json(),
        "models": {
            model: tally(rows, price_for).as_json() for model, rows in sorted(by_model.items())
        },
    }


def per_session(groups: Iterable[ChargeGroup], price_for: PriceFor) -> dict[tuple[str, str], Tally]:
    """One tally per session of `groups` (summed per session)."""
    out: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for group in groups:
        out[group.scope or "", group.key or ""].add(group, price_for(group.model))
    return dict(out)
