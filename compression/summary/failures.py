"""Classifying a failed summary call, and what each class costs.

    auth (401/402/403), network, empty, truncated  -> abort: the view is left unchanged
    overload, timeout (408/429/502/504), other     -> deterministic fallback summary

A forced pass (overflow recovery, the manual API, `--force`) falls back instead of aborting
on empty and truncated replies too: the summary model answered but nothing usable came back,
which a small model repeats for the same input, and aborting would leave a session that no
longer fits its window with nothing but an error. Auth and network failures still abort: the
upstream itself is refusing or unreachable, so the retried request would fail as well.

Each class also sets a cooldown (seconds from the options' ladder, escalating while the
same class keeps failing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from compression.engine import SummaryCallError

ABORT_CLASSES = frozenset({"auth", "network", "empty", "truncated"})
UNUSABLE_REPLY_CLASSES = frozenset({"empty", "truncated"})  # fall back when the pass is forced
_TIMEOUT_STATUSES = frozenset({408, 429, 502, 504})
_OVERLOAD_STATUSES = frozenset({503, 529})
_TIMEOUT_TEXT = re.compile(r"timed? ?out|timeout|deadline exceeded", re.IGNORECASE)
_OVERLOAD_TEXT = re.compile(r"overload|capacity|try again later", re.IGNORECASE)
_AUTH_TEXT = re.compile(
    r"api key|unauthori[sz]ed|forbidden|quota|insufficient_quota|billing", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class SummaryFailure:
    kind: str  # one of options.FAILURE_CLASSES
    detail: str

    @property
    def aborts(self) -> bool:
        return self.kind in ABORT_CLASSES

    def aborts_pass(self, forced: bool) -> bool:
        return self.aborts and not (forced and self.kind in UNUSABLE_REPLY_CLASSES)

    def describe(self) -> str:
        return f"summary call failed ({self.kind}): {self.detail}"


def classify_error(error: BaseException) -> SummaryFailure:
    detail = _detail(error)
    if isinstance(error, SummaryCallError):
        return SummaryFailure(_classify_call_error(error, detail), detail)
    if isinstance(error, TimeoutError):
        return SummaryFailure("timeout", detail or "the summary call timed out")
    if isinstance(error, ConnectionError | OSError):
        return SummaryFailure("network", detail)
    return SummaryFailure("other", detail)


def _classify_call_error(error: SummaryCallError, detail: str) -> str:
    status = error.status
    if status in (401, 402, 403) or (status is None and _AUTH_TEXT.search(detail)):
        return "auth"
    if error.network:
        return "network"
    if error.timeout or status in _TIMEOUT_STATUSES or _TIMEOUT_TEXT.search(detail):
        return "timeout"
    if status in _OVERLOAD_STATUSES or _OVERLOAD_TEXT.search(detail):
        return "overload"
    return "other"


def _detail(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    status = getattr(error, "status", None)
    prefix = f"HTTP {status}: " if isinstance(status, int) else ""
    return (prefix + text)[:300]


def cooldown_seconds(kind: str, streak: int, table: Mapping[str, tuple[float, ...]]) -> float:
    """The ladder step for the `streak`-th consecutive failure of a class (1-based)."""
    ladder = table.get(kind) or table.get("other") or (60.0,)
    return ladder[min(max(streak, 1), len(ladder)) - 1]
