"""The tokens-per-turn figure (eval.png); skipped without matplotlib."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.evaluation.runner import EvalResults, SessionResult
from compression import CompressorOptions

MAIN = "main"


def plot(results: EvalResults, path: Path) -> Path | None:
    """Tokens per turn for a tool-calling and a text-action session; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    chosen = _representatives(results.sessions)
    if not chosen:
        return None
    figure, axes = plt.subplots(len(chosen), 1, figsize=(10, 4 * len(chosen)), squeeze=False)
    for ax, session in zip(axes[:, 0], chosen, strict=True):
        _plot_session(ax, session)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _representatives(sessions: Sequence[SessionResult]) -> list[SessionResult]:
    picked = []
    for kind in ("tau", "swe-text"):
        match = next((s for s in sessions if s.kind == kind and MAIN in s.arms), None)
        if match is not None:
            picked.append(match)
    return picked


def _plot_session(ax: Any, session: SessionResult) -> None:
    arm = session.arms[MAIN]
    turns = range(1, session.turns + 1)
    ax.plot(turns, session.full.tokens_per_turn, label="full history", color="#999999")
    ax.plot(
        turns, session.masking.tokens_per_turn, label="observation masking (M=10)", color="#e69f00"
    )
    ax.plot(turns, arm.tokens_per_turn, label="ctxgate forwarded", color="#0072b2", lw=1.6)
    ax.axhline(session.window, color="#d55e00", ls="--", lw=1, label=f"window {session.window:,}")
    share = CompressorOptions().threshold
    ax.axhline(
        session.window * share,
        color="#009e73",
        ls=":",
        lw=1,
        label=f"agent threshold ({share:.0%})",
    )
    ax.set_title(
        f"{session.name}: {session.turns} turns, billed {arm.billed:,} vs full "
        f"{session.full.total:,} vs masking {session.masking.total:,} prompt tokens"
    )
    ax.set_xlabel("turn (request)")
    ax.set_ylabel("prompt tokens")
    ax.set_yscale("log")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
