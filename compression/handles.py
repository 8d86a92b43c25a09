"""Handles: the short names under which ctxgate keeps what a compression removed (pure).

A client message at position N of the client's list (0-based, the whole conversation, across
rotations) is archived as `mN` when a compression replaces it. The compacted view names those
handles where the content used to be, and the model reads the originals back through ctxgate's
recall tool:

    summary        its first line after the reference-only prefix lists every replaced range:
                   "[Archived originals: m2-m40, m43 ...]"
    rewritten      a one-liner, a pruned or clipped message ends with
                   "[archived original: m12 ...]"
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

RECALL_TOOL = "ctxgate_recall"

_HANDLE = re.compile(r"^m(\d{1,9})$")
_RANGE = re.compile(r"^m(\d{1,9})\s*[-\u2013]\s*m?(\d{1,9})$")
ARCHIVE_LINE = re.compile(r"^\[Archived originals: [^\n]*\]\n", re.MULTILINE)
SUFFIX = re.compile(r"\n\[archived original: m\d+[^\n]*\]$")


def handle(position: int) -> str:
    return f"m{position}"


def parse_handles(text: str, limit: int = 64) -> list[int] | None:
    """The positions a handle (`m12`) or a range (`m12-m15`) names; None when it is neither."""
    text = text.strip()
    single = _HANDLE.match(text)
    if single:
        return [int(single.group(1))]
    span = _RANGE.match(text)
    if not span:
        return None
    low, high = sorted((int(span.group(1)), int(span.group(2))))
    return list(range(low, min(high, low + limit - 1) + 1))


def ranges(positions: Iterable[int]) -> str:
    """`m2-m5, m9` for positions 2, 3, 4, 5 and 9."""
    spans: list[list[int]] = []
    for position in sorted(set(positions)):
        if spans and position == spans[-1][1] + 1:
            spans[-1][1] = position
        else:
            spans.append([position, position])
    return ", ".join(
        handle(low) if low == high else f"{handle(low)}-{handle(high)}" for low, high in spans
    )


def archive_line(positions: Sequence[int]) -> str:
    return (
        f"[Archived originals: {ranges(positions)} — the exact text of every compacted message; "
        f"call the {RECALL_TOOL} tool with a handle to read one, or with a query to search them.]\n"
    )


def rewritten_suffix(position: int) -> str:
    return f"\n[archived original: {handle(position)} — {RECALL_TOOL} reads it in full]"


def without_archive_line(text: str) -> str:
    """Summary text without the archive line (it is rewritten after every compression)."""
    return ARCHIVE_LINE.sub("", text, count=1)
