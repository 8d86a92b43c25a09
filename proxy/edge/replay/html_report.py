"""The replay's HTML page: the report's table and, per session, the prompt-size chart as
inline SVG (one self-contained file: no script, no external resource) (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from proxy.edge.replay.figures import SessionFigures
from proxy.edge.replay.report import text_report

W, H, PAD = 760, 260, 48
SENT, FORWARDED, WINDOW = "#999999", "#0072b2", "#d55e00"


def html_report(sessions: Sequence[SessionFigures]) -> str:
    charts = "\n".join(_section(s) for s in sessions)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>ctxgate replay</title>"
        "<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px}"
        "svg{border:1px solid #ddd}</style></head><body>\n<h1>ctxgate replay</h1>\n"
        f"<pre>{escape(text_report(sessions))}</pre>\n{charts}\n</body></html>\n"
    )


def _section(s: SessionFigures) -> str:
    return f"<h2>{escape(s.name)} ({escape(s.source)}, {escape(s.model)})</h2>\n{chart(s)}"


def chart(s: SessionFigures) -> str:
    """Prompt tokens per request: as the agent sent them, as ctxgate forwarded them, and the
    window."""
    sent = [r.original for r in s.requests]
    forwarded = [r.forwarded for r in s.requests]
    top = max([*sent, *(f or 0 for f in forwarded), s.window, 1])
    n = max(len(sent), 2)

    def x(i: int) -> float:
        return PAD + (W - 2 * PAD) * i / (n - 1)

    def y(v: int) -> float:
        return H - PAD + (2 * PAD - H) * v / top

    def line(values: Sequence[int | None], color: str) -> str:
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if v is not None)
        return f"<polyline fill='none' stroke='{color}' stroke-width='1.6' points='{points}'/>"

    legend = [
        ("as sent", SENT),
        ("forwarded by ctxgate", FORWARDED),
        (f"window {s.window:,}", WINDOW),
    ]
    keys = "".join(
        f"<text x='{PAD + 180 * i}' y='16' fill='{color}' font-size='12'>— {escape(label)}</text>"
        for i, (label, color) in enumerate(legend)
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' role='img' "
        f"aria-label='prompt tokens per request'>{keys}"
        f"<line x1='{PAD}' x2='{W - PAD}' y1='{y(s.window):.1f}' y2='{y(s.window):.1f}' "
        f"stroke='{WINDOW}' stroke-dasharray='4 3'/>"
        f"{line(sent, SENT)}{line(forwarded, FORWARDED)}"
        f"<text x='{PAD}' y='{H - 12}' font-size='11'>request 1</text>"
        f"<text x='{W - PAD}' y='{H - 12}' font-size='11' text-anchor='end'>request {len(sent)}"
        f"</text><text x='4' y='{PAD - 6}' font-size='11'>{top:,} tokens</text></svg>"
    )
