"""Markdown table cells and rows shared by the evaluation's reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Fraction = tuple[int, int]  # (kept, total)


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def frac(kept: Fraction) -> str:
    return f"{kept[0]}/{kept[1]} ({share(*kept)})" if kept[1] else "–"


def pooled(fractions: Iterable[Fraction]) -> Fraction:
    items = list(fractions)
    return sum(k for k, _ in items), sum(n for _, n in items)


def row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    return [row(header), row("---" for _ in header), *(row(r) for r in rows)]
