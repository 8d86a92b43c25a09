"""Figures by session kind (coding agent vs chat or tool service) and per edit, for the report.

A coding agent's session and a customer-service chat stress a compressor differently: the
first re-reads and edits files, the second carries the user's stated rules. Pooling them hides
either, so user-message retention is also given per kind, beside the all-sessions figure.
"""

from __future__ import annotations

from typing import Any

from bench.evaluation.edits import CODING, CODING_GROUPS, ONE_TASK_CODING, SERVICE, group_of
from bench.evaluation.metrics import ArmResult
from bench.evaluation.runner import EvalResults
from bench.evaluation.tables import frac, pooled, table

ALL = "all sessions"
GROUP_ORDER = (CODING, ONE_TASK_CODING, SERVICE, ALL)


def _arms(results: EvalResults, arm: str, group: str) -> list[ArmResult]:
    return [
        s.arms[arm] for s in results.sessions if arm in s.arms and group in (ALL, group_of(s.kind))
    ]


def kind_figures(arms: list[ArmResult]) -> dict[str, Any]:
    """Pooled figures of some sessions' replays of one arm."""
    fitting = [a for a in arms if a.user_words_fit]
    return {
        "sessions": len(arms),
        "user": pooled(a.retention.user for a in arms),
        "constraints": pooled(a.retention.constraints for a in arms),
        "fitting": len(fitting),
        "user_fitting": pooled(a.retention.user for a in fitting),
        "constraints_fitting": pooled(a.retention.constraints for a in fitting),
        "edits": sum(a.edits for a in arms),
        "edit_reads": pooled(a.edit_reads for a in arms),
        "search_hits": pooled(a.search_hits for a in arms),
    }


def kinds_table(results: EvalResults) -> list[str]:
    header = [
        "arm",
        "session kind",
        "sessions",
        "user msgs",
        "constraint msgs",
        "sessions whose user msgs fit",
        "user msgs (fit)",
        "constraint msgs (fit)",
        "edits",
        "newest read in view at edit",
        "archive search for `ID:` / `ID.` found it",
    ]
    rows = []
    for arm in results.config.arms:
        for group in GROUP_ORDER:
            arms = _arms(results, arm, group)
            if not arms:
                continue
            figures = kind_figures(arms)
            rows.append(
                [
                    arm,
                    group,
                    figures["sessions"],
                    frac(figures["user"]),
                    frac(figures["constraints"]),
                    figures["fitting"],
                    frac(figures["user_fitting"]),
                    frac(figures["constraints_fitting"]),
                    figures["edits"] if group != SERVICE else "–",
                    frac(figures["edit_reads"]),
                    frac(figures["search_hits"]),
                ]
            )
    return table(header, rows)


def edits_table(results: EvalResults) -> list[str]:
    rows = [
        [s.name, arm, result.edits, result.edit_reads[1], frac(result.edit_reads)]
        for s in results.sessions
        if group_of(s.kind) in CODING_GROUPS
        for arm, result in s.arms.items()
    ]
    header = ["session", "arm", "edits", "with an earlier read", "newest read in view at edit"]
    return table(header, rows)


def kinds_json(results: EvalResults) -> dict[str, dict[str, Any]]:
    return {
        arm: {
            group: kind_figures(arms)
            for group in GROUP_ORDER
            if (arms := _arms(results, arm, group))
        }
        for arm in results.config.arms
    }


def missed_searches(results: EvalResults, most: int = 8) -> str:
    """The end of the archive-search sentence: which queries missed, if any."""
    missed = [q for s in results.sessions for a in s.arms.values() for q in a.search_missed]
    if not missed:
        return "."
    shown = ", ".join(f"`{q}`" for q in list(dict.fromkeys(missed))[:most])
    return f"; queries that missed: {shown}."
