"""Build the sessions, replay every arm, compute the metrics (the in-process entry point)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.evaluation.baselines import full_history, masking
from bench.evaluation.corpus import KINDS, Session, build_sessions, find_corpus
from bench.evaluation.metrics import (
    ArmResult,
    BaselineResult,
    arm_result,
    baseline_result,
    masking_result,
)
from bench.evaluation.needles import plant
from bench.evaluation.progress import Progress
from bench.evaluation.replay import replay
from bench.evaluation.shadow import ShadowResult, measure

REPO = Path(__file__).resolve().parents[2]
KIND_CYCLE = ("tau", "swe-text", "agents", "swe-fc", "tau", "swe-text")
# One-task coding sessions: a recorded agent's task statement, then many tool turns.
TASK_CYCLE = ("task-swe-fc", "task-swe-text")
# OpenCode's system prompt and tool schemas alone take 7.2K tokens: at 8K a single tool output
# cannot fit beside them, whatever a proxy does.
MIN_WINDOW = {"agents": 16384}


@dataclass(frozen=True)
class ArmSpec:
    """One configuration of ctxgate (and of the simulated summary model)."""

    description: str
    background: bool = True
    summarizer: str = "fit"
    scaled_threshold: bool = True
    recall_calls: int = 4  # the simulated model's recall calls per question (0: never)
    ahead: bool = True  # ctxgate's recall before asking (`compression.recall.ahead`)

    def options(self, window: int) -> dict[str, Any]:
        # ctxgate's 64K floor on the agent threshold is meant for 128K windows, where it means
        # "compress at 50%"; scaled by W/128K it keeps that meaning at the small test windows.
        # Unscaled ("stock"), a small window only compresses at the 85% hygiene line.
        return {"min_threshold_tokens": max(1, window // 2)} if self.scaled_threshold else {}


ARMS: dict[str, ArmSpec] = {
    "main": ArmSpec("background on, agent threshold 50%, summary model within budget"),
    "bg-off": ArmSpec("as main, background compression off", background=False),
    "stock": ArmSpec(
        "as main, stock options (small windows compress at 85% only)", scaled_threshold=False
    ),
    "stub": ArmSpec(
        "as main, simulator summarizer that overruns (finish_reason=length)", summarizer="stub"
    ),
    "fail": ArmSpec(
        "as main, every summary call fails (deterministic fallback)", summarizer="fail"
    ),
    "never-recall": ArmSpec(
        "as main, a model that never calls the recall tool: it answers from its view only",
        recall_calls=0,
    ),
    "ahead-off": ArmSpec("as main, recall before asking off", ahead=False),
}
QUICK_ARMS = ("main", "bg-off")
MAIN = "main"
# Replaying a session costs turns × history, which grows with the square of the window: the
# larger windows get fewer sessions and arms (the full run stays within ~15 min on 2 CPUs), and
# from LARGE_WINDOW on sessions are 3 windows long instead of 5.
LARGE_WINDOW = 65536
LARGE_SIZE = 3.0
WINDOW_PLAN: dict[int, tuple[int, tuple[str, ...]]] = {
    16384: (3, ("main", "fail", "never-recall", "ahead-off")),
    65536: (2, ("main", "never-recall")),
    131072: (1, ("main", "never-recall")),
}


@dataclass
class EvalConfig:
    windows: tuple[int, ...] = (8192, 16384, 65536, 131072)
    sessions: int = 6  # per window (at most WINDOW_PLAN's for the windows it names)
    size_factor: float = 5.0  # each session at least this many windows long (3 from 64K on)
    arms: tuple[str, ...] = tuple(ARMS)
    plan: dict[int, tuple[int, tuple[str, ...]]] = field(default_factory=lambda: WINDOW_PLAN)
    gap_s: float = 0.02  # an agent runs tools between calls; background work overlaps that
    seed: int = 0
    corpus: Path | None = None
    show_progress: bool = True
    llama_url: str | None = None
    quick: bool = False
    shadow: bool = True  # shadow-agreement replays of each session (arm main's options)
    one_task: int = 2  # one-task coding sessions per window, beside the chained ones
    # Each turn waits for the session's background compression to land (bounded), as a real
    # agent's seconds-long turns let it: the figures do not depend on the machine's speed.
    await_compression: bool = True

    def sessions_at(self, window: int) -> int:
        planned = self.plan.get(window)
        return min(self.sessions, planned[0]) if planned else self.sessions

    def arms_at(self, window: int) -> tuple[str, ...]:
        """The configured arms, narrowed to the plan's for this window (never to none)."""
        planned = self.plan.get(window)
        if not planned:
            return self.arms
        return tuple(a for a in self.arms if a in planned[1]) or self.arms[:1]

    def size_at(self, window: int) -> float:
        return self.size_factor if window < LARGE_WINDOW else min(self.size_factor, LARGE_SIZE)

    def kinds(self, window: int) -> list[str]:
        usable = [kind for kind in KIND_CYCLE if window >= MIN_WINDOW.get(kind, 0)]
        chained = [usable[i % len(usable)] for i in range(self.sessions_at(window))]
        return chained + [TASK_CYCLE[i % len(TASK_CYCLE)] for i in range(self.one_task)]


@dataclass
class SessionResult:
    name: str
    kind: str
    window: int
    messages: int
    turns: int
    tokens: int  # the full history at the last request
    sources: list[str]
    needles: list[dict[str, Any]]
    full: BaselineResult
    masking: BaselineResult
    arms: dict[str, ArmResult] = field(default_factory=dict)
    shadow: list[ShadowResult] = field(default_factory=list)


@dataclass
class EvalResults:
    config: EvalConfig
    sessions: list[SessionResult]
    seconds: float
    probes: dict[str, Any] | None = None


def _session_result(session: Session) -> SessionResult:
    points = session.points()
    full = full_history(session)
    return SessionResult(
        name=session.name,
        kind=session.kind,
        window=session.window,
        messages=len(session.messages),
        turns=len(points),
        tokens=full.tokens[-1],
        sources=session.sources,
        needles=[vars(n) for n in session.needles],
        full=baseline_result(session, full),
        masking=masking_result(session, masking(session)),
    )


def prepare_sessions(config: EvalConfig) -> list[Session]:
    corpus = config.corpus or find_corpus(REPO)
    sessions: list[Session] = []
    for window in config.windows:
        built = build_sessions(corpus, config.kinds(window), window, config.size_at(window))
        for session in built:
            plant(session, config.seed)
        sessions.extend(built)
    return sessions


def evaluate(config: EvalConfig) -> EvalResults:
    """Run the whole evaluation in this process (servers on loopback threads)."""
    unknown = [arm for arm in config.arms if arm not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm {unknown[0]!r}; choose from {sorted(ARMS)}")
    started = time.monotonic()
    sessions = prepare_sessions(config)
    replays = sum(len(config.arms_at(s.window)) for s in sessions)
    replays += len(sessions) if config.shadow else 0
    bar = Progress(replays, enabled=config.show_progress)
    results: list[SessionResult] = []
    for session in sessions:
        result = _session_result(session)
        for arm in config.arms_at(session.window):
            spec = ARMS[arm]
            bar.start(f"{session.name} {arm}")
            run = replay(
                session,
                background=spec.background,
                summarizer=spec.summarizer,
                options=spec.options(session.window),
                gap_s=config.gap_s,
                progress=bar.update,
                recall_calls=spec.recall_calls,
                await_compression=config.await_compression,
                ahead=spec.ahead,
            )
            result.arms[arm] = arm_result(arm, session, run, spec.options(session.window))
            errors = result.arms[arm].client_errors
            bar.finish_replay(
                f"{run.seconds:.0f}s" + (f", {errors} client errors" if errors else "")
            )
        if config.shadow:
            bar.start(f"{session.name} shadow")
            result.shadow = measure(
                session,
                ARMS[MAIN].options(session.window),
                await_compression=config.await_compression,
            )
            bar.finish_replay(", ".join(f"{r.variant} {r.checks} checks" for r in result.shadow))
        results.append(result)
    probes = None
    if config.llama_url is not None:
        from bench.evaluation.probes import run_probes

        probes = run_probes(config.llama_url, config)
    return EvalResults(config, results, time.monotonic() - started, probes)


__all__ = ["ARMS", "KINDS", "QUICK_ARMS", "EvalConfig", "EvalResults", "SessionResult", "evaluate"]
