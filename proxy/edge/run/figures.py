"""What a run did, read from the server's own metrics, and the summary printed at exit (pure).

The figures come from the Prometheus text of `/metrics` (or the embedded server's registry,
rendered the same way): an embedded server counts only this run; an attached one counts all
its clients, so the run's share is the difference between a reading before and one after.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

COMMITTED = frozenset({"compressed", "fallback"})  # the outcomes that changed what was sent
SIMPLE = {  # counter -> field, every label summed
    "ctxgate_compression_tokens_before_total": "tokens_before",
    "ctxgate_compression_tokens_after_total": "tokens_after",
    "ctxgate_recall_calls_total": "recall_calls",
    "ctxgate_recall_tokens_total": "recall_tokens",
    "ctxgate_overflow_errors_total": "overflows",
    "ctxgate_billed_usd_total": "billed_usd",
    "ctxgate_full_history_usd_total": "full_usd",
}


@dataclass(frozen=True, slots=True)
class Figures:
    requests: int = 0  # answered requests of the front doors (errors included)
    errors: int = 0  # of which answered with a status of 400 or more
    compressions: int = 0
    tokens_before: int = 0  # summed over the compressions, before and after each
    tokens_after: int = 0
    recall_calls: int = 0
    recall_tokens: int = 0
    overflows: int = 0  # upstream context-overflow errors ctxgate saw (and recovered or relayed)
    # Prompt tokens the provider billed for the client requests, and what their uncompressed
    # histories would have been billed; dollars of every call (summaries included) against the
    # uncompressed histories' (priced models only). Zero where the server does not count them.
    billed_prompt_tokens: int = 0
    full_prompt_tokens: int = 0
    billed_usd: float = 0.0
    full_usd: float = 0.0

    @property
    def tokens_cut(self) -> int:
        return max(0, self.tokens_before - self.tokens_after)

    def with_usd(self, billed: float, full: float) -> Figures:
        return replace(self, billed_usd=billed, full_usd=full)

    def since(self, earlier: Figures) -> Figures:
        """The figures of what happened after `earlier` was read."""
        return Figures(
            *(
                max(0, getattr(self, name) - getattr(earlier, name))
                for name in Figures.__dataclass_fields__
            )
        )


def read_figures(text: str) -> Figures:
    """Figures from ctxgate's metrics in the Prometheus text format."""
    counts = {name: 0.0 for name in Figures.__dataclass_fields__}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in SIMPLE:
                counts[SIMPLE[name]] += value
            elif name == "ctxgate_requests_total":
                counts["requests"] += value
                if labels.get("status", "").isdigit() and int(labels["status"]) >= 400:
                    counts["errors"] += value
            elif name == "ctxgate_compressions_total" and labels.get("outcome") in COMMITTED:
                counts["compressions"] += value
            elif labels.get("tier") == "output":
                continue
            elif name == "ctxgate_billed_tokens_total" and labels.get("kind") == "request":
                counts["billed_prompt_tokens"] += value
            elif name == "ctxgate_full_history_tokens_total":
                counts["full_prompt_tokens"] += value
    usd = {"billed_usd", "full_usd"}
    whole = {name: int(value) for name, value in counts.items() if name not in usd}
    return Figures(**whole).with_usd(counts["billed_usd"], counts["full_usd"])


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def exit_line(agent: str, code: int) -> str:
    if code > 128:
        return f"{agent} ended by signal {code - 128} (exit code {code})"
    return f"{agent} exited with code {code}"


def summary(figures: Figures, *, agent: str, code: int, where: list[str]) -> str:
    """The lines printed on stderr once the agent has exited (`where`: the dashboard's and the
    sessions' places, one line each)."""
    requests = _plural(figures.requests, "request")
    if figures.errors:
        requests += f" ({figures.errors:,} answered with an error)"
    compressions = _plural(figures.compressions, "compression")
    if figures.compressions:
        compressions += f", {figures.tokens_cut:,} tokens cut from the context"
    recall = _plural(figures.recall_calls, "recall call")
    if figures.recall_calls:
        recall += f" ({figures.recall_tokens:,} tokens read back)"
    lines = [
        exit_line(agent, code),
        f"{requests} through ctxgate; {compressions}; {recall}",
    ]
    if figures.full_prompt_tokens:
        lines.append(
            f"prompt tokens billed: {figures.billed_prompt_tokens:,}, "
            f"{figures.full_prompt_tokens:,} without compression"
        )
    if figures.full_usd:
        lines.append(
            f"cost: ${figures.billed_usd:,.4f}, ${figures.full_usd:,.4f} without compression "
            "(summary and recall calls included)"
        )
    if figures.overflows:
        lines.append(f"{_plural(figures.overflows, 'context overflow')} from the provider")
    lines += where
    return "".join(f"ctxgate: {line}\n" for line in lines)
