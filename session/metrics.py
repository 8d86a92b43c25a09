"""Prometheus metrics, one registry per app (so several apps in one process stay apart).

Under `ctxgate serve --workers N` each worker process counts on its own, and a scrape reaches
one of them: there prometheus_client's multiprocess mode keeps every process's values in files
of one directory (`PROMETHEUS_MULTIPROC_DIR`, set by the supervisor before it starts the
workers), and `render` adds up the files of all of them, those of exited workers too.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from session.ledger.book import Charged
from session.ledger.tiers import Split
from session.turn import Turn

_LATENCY = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)


_CHILDREN_KEPT = 4096  # labelled charge counters remembered (see Metrics._child)

# prometheus_client's own switch, read by the library when it is imported: set, every value
# of the process lives in a file of that directory instead of in memory.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess() -> bool:
    """Whether prometheus_client keeps this process's values in files (multiprocess mode)."""
    return values.ValueClass is not values.MutexValue


def process_gone(pid: int, directory: str) -> None:
    """Drop an exited worker's gauges from the sums (its counters keep counting)."""
    mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


class Metrics:
    def __init__(self) -> None:
        self._every_process = multiprocess()
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ctxgate_requests_total",
            "Requests to the model APIs (chat completions, responses, messages, Gemini) by "
            "final HTTP status, ctxgate's own errors included",
            ["status"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "ctxgate_upstream_seconds",
            "Upstream call latency (headers received)",
            ["upstream"],
            buckets=_LATENCY,
            registry=r,
        )
        self.overhead = Histogram(
            "ctxgate_overhead_seconds",
            "Time ctxgate spent before forwarding (parsing, session, triggers, compression)",
            buckets=_LATENCY,
            registry=r,
        )
        self.compressions = Counter(
            "ctxgate_compressions_total",
            "Compressions by trigger and outcome",
            ["trigger", "outcome"],
            registry=r,
        )
        self.tokens_before = Counter(
            "ctxgate_compression_tokens_before_total",
            "Tokens of views before compression",
            registry=r,
        )
        self.tokens_after = Counter(
            "ctxgate_compression_tokens_after_total",
            "Tokens of views after compression",
            registry=r,
        )
        self.overflows = Counter(
            "ctxgate_overflow_errors_total", "Upstream context-overflow errors seen", registry=r
        )
        self.active_sessions = Gauge(
            "ctxgate_active_sessions",
            "Sessions seen in the last 15 minutes",
            registry=r,
            multiprocess_mode="livesum",  # workers' counts added up, exited workers' dropped
        )
        self.recalls = Counter(
            "ctxgate_recall_calls_total",
            "Calls of ctxgate's recall tool answered from the archive, by kind",
            ["kind"],
            registry=r,
        )
        self.recall_tokens = Counter(
            "ctxgate_recall_tokens_total", "Tokens of archived text read back", registry=r
        )
        self.recall_hidden = Counter(
            "ctxgate_recall_hidden_total",
            "Recall calls kept from the client unanswered (budget spent, a failed round, or "
            "a call after the answer had started streaming)",
            registry=r,
        )
        self.billed_tokens = Counter(
            "ctxgate_billed_tokens_total",
            "Tokens upstreams billed, by model, kind of call (request, summary, recall, "
            "shadow) and tier (uncached, cache_read, cache_write, output)",
            ["model", "kind", "tier"],
            registry=r,
        )
        self.full_tokens = Counter(
            "ctxgate_full_history_tokens_total",
            "Tokens the uncompressed histories of client requests would have been billed, by "
            "model and tier (the provider's prefix caching applied)",
            ["model", "tier"],
            registry=r,
        )
        self.billed_usd = Counter(
            "ctxgate_billed_usd_total",
            "US dollars billed at the configured prices, by model and kind (priced models only)",
            ["model", "kind"],
            registry=r,
        )
        self.full_usd = Counter(
            "ctxgate_full_history_usd_total",
            "US dollars the uncompressed histories would have been billed (priced models only)",
            ["model"],
            registry=r,
        )
        self.shadow_checks = Counter(
            "ctxgate_shadow_checks_total",
            "Shadow checks completed, by model and trigger",
            ["model", "trigger"],
            registry=r,
        )
        self.shadow_agreements = Counter(
            "ctxgate_shadow_agreements_total",
            "Shadow checks whose next actions agreed, by model, trigger and pair (b_vs_a: "
            "compressed against uncompressed; a2_vs_a: uncompressed twice, the noise floor)",
            ["model", "trigger", "pair"],
            registry=r,
        )
        self._recent: dict[str, float] = {}
        self._prune_at = 0.0
        # The labelled children, resolved once: `labels()` validates and joins the label
        # values under a lock on every call, a few microseconds each on every request.
        self._finished: dict[int, Counter] = {}
        self._upstream: dict[str, Histogram] = {}
        # The charge counters' children, by metric and label values (models are the
        # clients' words: bounded, forgotten all at once when full).
        self._charged: dict[tuple[str, ...], Counter] = {}

    def prepared(self, turn: Turn, seconds: float) -> None:
        self.overhead.observe(seconds)
        now = time.monotonic()
        self._recent[turn.key.key] = now
        if len(self._recent) > 10_000 or now >= self._prune_at:
            self._recent = {k: t for k, t in self._recent.items() if now - t < 900}
            self._prune_at = now + 30
        self.active_sessions.set(len(self._recent))

    def compression(self, trigger: str, outcome: str, before: int, after: int) -> None:
        self.compressions.labels(trigger, outcome).inc()
        self.tokens_before.inc(before)
        self.tokens_after.inc(after)

    def upstream_done(self, turn: Turn, sent: float, status: int) -> None:
        name = turn.upstream.settings.name
        child = self._upstream.get(name)
        if child is None:
            child = self._upstream[name] = self.upstream_latency.labels(name)
        child.observe(time.perf_counter() - sent)

    def overflow(self) -> None:
        self.overflows.inc()

    def finished(self, status: int) -> None:
        """A request answered (an error answer too)."""
        child = self._finished.get(status)
        if child is None:
            child = self._finished[status] = self.requests.labels(str(status))
        child.inc()

    def recalled(self, kind: str, tokens: int) -> None:
        self.recalls.labels(kind).inc()
        self.recall_tokens.inc(tokens)

    def charged(self, charged: Charged) -> None:
        """One upstream call's charge recorded by the ledger."""
        model, kind = charged.model, charged.kind
        for tier, tokens in _tiers(charged.billed):
            if tokens:
                self._child(self.billed_tokens, "billed", model, kind, tier).inc(tokens)
        if charged.full is not None:
            for tier, tokens in _tiers(charged.full):
                if tokens:
                    self._child(self.full_tokens, "full", model, tier).inc(tokens)
        if charged.billed_usd is not None:
            self._child(self.billed_usd, "billed_usd", model, kind).inc(charged.billed_usd)
        if charged.full_usd is not None:
            self._child(self.full_usd, "full_usd", model).inc(charged.full_usd)

    def _child(self, metric: Counter, name: str, *labels: str) -> Counter:
        """`metric.labels(*labels)`, remembered under `name` and the label values."""
        key = (name, *labels)
        child = self._charged.get(key)
        if child is None:
            if len(self._charged) >= _CHILDREN_KEPT:
                self._charged.clear()
            child = self._charged[key] = metric.labels(*labels)
        return child

    def shadowed(self, model: str, trigger: str, agrees: bool, noise_agrees: bool) -> None:
        """One shadow check's comparison."""
        self.shadow_checks.labels(model, trigger).inc()
        agreements = self.shadow_agreements
        agreements.labels(model, trigger, "b_vs_a").inc(1 if agrees else 0)
        agreements.labels(model, trigger, "a2_vs_a").inc(1 if noise_agrees else 0)

    def render(self) -> bytes:
        if not self._every_process:
            return generate_latest(self.registry)
        every_worker = CollectorRegistry()
        MultiProcessCollector(every_worker)  # type: ignore[no-untyped-call]
        return generate_latest(every_worker)


def _tiers(split: Split) -> tuple[tuple[str, int], ...]:
    return (
        ("uncached", split.uncached),
        ("cache_read", split.cache_read),
        ("cache_write", split.cache_write),
        ("output", split.output),
    )
