"""The replay's report: a text table per session, and the same figures as JSON (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.edge.replay.figures import SessionFigures


def as_json(sessions: Sequence[SessionFigures]) -> dict[str, Any]:
    return {"sessions": [_session_json(s) for s in sessions]}


def _session_json(s: SessionFigures) -> dict[str, Any]:
    kept, users = s.users_in_view
    sent_over, forwarded_over = s.over_window
    return {
        "name": s.name,
        "source": s.source,
        "api": s.api,
        "model": s.model,
        "window": s.window,
        "requests": len(s.requests),
        "errors": s.errors,
        "without": {**s.without.as_json(), "usd": s.usd(s.without)},
        "with": {**s.with_ctxgate.as_json(), "usd": s.usd(s.with_ctxgate)},
        "summary_calls": len(s.summaries),
        "compressions": [{"trigger": t, "outcome": o} for t, o in s.compressions],
        "user_messages_in_view": {"kept": kept, "total": users},
        "newest_read_at_edit": {"kept": s.edits_kept, "total": s.edits},
        "over_window": {"sent": sent_over, "forwarded": forwarded_over},
        "prompt_tokens": [
            {"sent": r.original, "forwarded": r.forwarded, "error": r.error} for r in s.requests
        ],
        "seconds": round(s.seconds, 3),
    }


def text_report(sessions: Sequence[SessionFigures]) -> str:
    header = [
        "session", "format", "model", "window", "requests", "prompt tokens without → with",
        "money without → with", "compressions", "user msgs in view", "read in view at edit",
    ]  # fmt: skip
    rows = [header, *(_row(s) for s in sessions)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [_note(s) for s in sessions]
    return "\n".join(lines + [n for n in notes if n]) + "\n"


def _row(s: SessionFigures) -> list[str]:
    without, with_ = s.without, s.with_ctxgate
    counted = [o for _, o in s.compressions if o not in ("noop", "rejected")]
    return [
        s.name[:36],
        s.source,
        s.model,
        f"{s.window:,}",
        str(len(s.requests)),
        f"{without.prompt:,} → {with_.prompt:,} ({_change(without.prompt, with_.prompt)})",
        _money(s),
        _compressions(counted),
        _share(*s.users_in_view),
        _share(s.edits_kept, s.edits),
    ]


def _compressions(outcomes: Sequence[str]) -> str:
    kinds = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
    return f"{len(outcomes)}" + (
        f" ({', '.join(f'{n} {o}' for o, n in kinds.items())})" if kinds else ""
    )


def _money(s: SessionFigures) -> str:
    without, with_ = s.usd(s.without), s.usd(s.with_ctxgate)
    if without is None or with_ is None:
        return "no price for the model"
    return f"${without:.2f} → ${with_:.2f} ({_change(without, with_)})"


def _change(before: float, after: float) -> str:
    if not before:
        return "–"
    return f"{100 * (after - before) / before:+.0f}%"


def _share(kept: int, total: int) -> str:
    return f"{100 * kept / total:.0f}% of {total}" if total else "–"


def _note(s: SessionFigures) -> str:
    sent, forwarded = s.over_window
    parts = []
    if sent or forwarded:
        parts.append(f"{sent} requests over the window as sent, {forwarded} as forwarded")
    if s.errors:
        first = next(r.error for r in s.requests if r.error is not None)
        parts.append(f"{s.errors} requests answered with an error (first: {first})")
    return f"{s.name}: " + "; ".join(parts) if parts else ""
