"""Prometheus metrics, one registry per app (so several apps in one process stay apart)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.core.turn import Turn

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


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ctxgate_requests_total", "Chat requests by final status", ["status"], registry=r
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
            "ctxgate_active_sessions", "Sessions seen in the last 15 minutes", registry=r
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
        self._recent: dict[str, float] = {}
        self._prune_at = 0.0
        # The labelled children, resolved once: `labels()` validates and joins the label
        # values under a lock on every call, a few microseconds each on every request.
        self._finished: dict[int, Counter] = {}
        self._upstream: dict[str, Histogram] = {}

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
