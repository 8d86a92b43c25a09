"""Markdown tables, JSON and the tokens-per-turn plot of an evaluation."""

from __future__ import annotations

import json
import math
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.evaluation.artifacts import KINDS as ARTIFACT_KINDS
from bench.evaluation.kinds import edits_table, kinds_json, kinds_table, missed_searches
from bench.evaluation.metrics import ArmResult, Retention
from bench.evaluation.money import MONEY_NOTE, money_table
from bench.evaluation.needles import DEPTHS, PLACES
from bench.evaluation.plot import plot
from bench.evaluation.recoverable import pooled as pooled_recoverable
from bench.evaluation.runner import ARMS, LARGE_WINDOW, EvalConfig, EvalResults, SessionResult
from bench.evaluation.shadow import SHADOW_HEADER, SHADOW_NOTE, shadow_pooled, shadow_rows
from bench.evaluation.tables import Fraction, frac, pooled, share
from bench.evaluation.tables import table as _table

MAIN = "main"


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def artifacts_total(retention: Retention) -> Fraction:
    return pooled(retention.artifacts.values())


def needles_of(retention: Retention | None, place: str | None = None) -> Fraction:
    if retention is None:
        return 0, 0
    hits = [v for k, v in retention.needles.items() if place is None or k.startswith(place)]
    return sum(hits), len(hits)


def needle_marks(retention: Retention | None, place: str) -> str:
    if retention is None:
        return "–"
    marks = []
    for depth in DEPTHS:
        present = retention.needles.get(f"{place}@{round(depth * 100)}%")
        marks.append("·" if present is None else ("✓" if present else "✗"))
    return "".join(marks)


def compressions_text(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def latency_text(values: Sequence[float]) -> str:
    cells = [percentile(values, q) for q in (0.5, 0.95)] + [max(values, default=None)]
    return " / ".join("–" if v is None else f"{v:.0f}" for v in cells)


def _main(session: SessionResult) -> ArmResult | None:
    return session.arms.get(MAIN) or next(iter(session.arms.values()), None)


def tokens_table(results: EvalResults) -> list[str]:
    header = [
        "session",
        "size",
        "turns",
        "client errors (overflow)",
        "provider refusals",
        "invalid fwd",
        "billed ctxgate",
        "full history",
        "masking M=10",
        "full fits",
        "masking fits",
        "cached prefix ctxgate / full / mask",
        "compressions",
    ]
    rows = []
    for s in results.sessions:
        arm = _main(s)
        if arm is None:
            continue
        full = s.full.total
        rows.append(
            [
                s.name,
                f"{s.tokens / s.window:.1f}×W",
                s.turns,
                f"{arm.client_errors} ({arm.client_overflows})",
                arm.provider_refusals,
                f"{arm.invalid}/{arm.forwarded}",
                f"{arm.billed:,} ({share(arm.billed, full)})",
                f"{full:,}",
                f"{s.masking.total:,} ({share(s.masking.total, full)})",
                share(s.full.fits, s.turns),
                share(s.masking.fits, s.turns),
                " / ".join(
                    [
                        share(arm.cached_prefix, arm.billed - arm.billed_summary),
                        share(s.full.cached_prefix, full),
                        share(s.masking.cached_prefix, s.masking.total),
                    ]
                ),
                compressions_text(arm.compressions),
            ]
        )
    return _table(header, rows)


def retention_table(results: EvalResults) -> list[str]:
    header = [
        "session",
        "user msgs ctxgate",
        "user msgs masking",
        "constraint msgs ctxgate · mask",
        "original request ctxgate",
        "artifacts ctxgate",
        "artifacts masking",
        "needles user 10/50/90 ctxgate · mask",
        "needles tool 10/50/90 ctxgate · mask",
    ]
    rows = []
    for s in results.sessions:
        arm = _main(s)
        if arm is None:
            continue
        ours, mask = arm.retention, s.masking.retention
        assert mask is not None
        rows.append(
            [
                s.name,
                frac(ours.user),
                frac(mask.user),
                f"{frac(ours.constraints)} · {frac(mask.constraints)}",
                _original(ours),
                frac(artifacts_total(ours)),
                frac(artifacts_total(mask)),
                f"{needle_marks(ours, 'user')} · {needle_marks(mask, 'user')}",
                f"{needle_marks(ours, 'tool')} · {needle_marks(mask, 'tool')}",
            ]
        )
    return _table(header, rows)


def _original(retention: Retention) -> str:
    if retention.original_request:
        return "kept"
    return "head kept (clipped)" if retention.original_head else "lost"


def arms_table(results: EvalResults) -> list[str]:
    header = [
        "arm",
        "what",
        "client errors (overflow)",
        "invalid fwd",
        "billed / full",
        "summary calls / billed",
        "user msgs",
        "constraint msgs",
        "original request kept / head kept",
        "newest user msg verbatim (turns)",
        "artifacts",
        "needles user",
        "needles tool",
        "compressions",
        "added ms p50/p95/max",
        "sync-compression turns",
        "waits for bg compression (timed out)",
    ]
    rows = []
    for name in results.config.arms:
        arms = [s.arms[name] for s in results.sessions if name in s.arms]
        full = sum(s.full.total for s in results.sessions if name in s.arms)
        counts: Counter[str] = Counter()
        for arm in arms:
            counts.update(arm.compressions)
        rows.append(
            [
                name,
                ARMS[name].description,
                f"{sum(a.client_errors for a in arms)} ({sum(a.client_overflows for a in arms)})",
                f"{sum(a.invalid for a in arms)}/{sum(a.forwarded for a in arms)}",
                share(sum(a.billed for a in arms), full),
                share(sum(a.billed_summary for a in arms), sum(a.billed for a in arms)),
                frac(pooled(a.retention.user for a in arms)),
                frac(pooled(a.retention.constraints for a in arms)),
                f"{sum(a.retention.original_request for a in arms)}"
                f" / {sum(a.retention.original_head for a in arms)} of {len(arms)}",
                frac(pooled(a.newest_user for a in arms)),
                frac(pooled(artifacts_total(a.retention) for a in arms)),
                frac(pooled(needles_of(a.retention, "user") for a in arms)),
                frac(pooled(needles_of(a.retention, "tool") for a in arms)),
                compressions_text(dict(counts)),
                latency_text([v for a in arms for v in a.added_ms]),
                sum(a.sync_turns for a in arms),
                f"{sum(a.waits for a in arms)} ({sum(a.wait_timeouts for a in arms)})",
            ]
        )
    return _table(header, rows)


def lossless_table(results: EvalResults) -> list[str]:
    """Per arm and window: planted facts answered (the recall model may read ctxgate's archive),
    recoverable retention of the final view, verbatim retention, tokens."""
    header = [
        "arm",
        "window",
        "sessions",
        "facts answered",
        "via recall",
        "facts in view",
        "recoverable retention (sessions at 100%)",
        "verbatim retention",
        "archived (all positions)",
        "lost",
        "billed / full",
        "billed / masking",
    ]
    rows = []
    for name in results.config.arms:
        for window in results.config.windows:
            sessions = [s for s in results.sessions if s.window == window and name in s.arms]
            if not sessions:
                continue
            arms = [s.arms[name] for s in sessions]
            probes = [p for a in arms for p in a.probes]
            kept = pooled_recoverable(a.recoverable for a in arms)
            complete = sum(
                1 for a in arms if a.recoverable.recoverable[0] == a.recoverable.messages
            )
            billed = sum(a.billed for a in arms)
            rows.append(
                [
                    name,
                    f"{window // 1024}K",
                    len(sessions),
                    frac((sum(p.correct for p in probes), len(probes))),
                    sum(a.recall_answers for a in arms),
                    frac((sum(p.in_view for p in probes), len(probes))),
                    f"{frac(kept.recoverable)} ({complete}/{len(arms)})",
                    frac(kept.verbatim_share),
                    frac(kept.with_archive),
                    len(kept.lost),
                    share(billed, sum(s.full.total for s in sessions)),
                    share(billed, sum(s.masking.total for s in sessions)),
                ]
            )
    return _table(header, rows)


def artifact_kind_table(results: EvalResults) -> list[str]:
    rows = []
    for kind in ARTIFACT_KINDS:
        ours = pooled(
            a.retention.artifacts.get(kind, (0, 0))
            for s in results.sessions
            if (a := _main(s)) is not None
        )
        mask = pooled(
            s.masking.retention.artifacts.get(kind, (0, 0))
            for s in results.sessions
            if s.masking.retention is not None
        )
        if ours[1] or mask[1]:
            rows.append([kind, ours[1], frac(ours), frac(mask)])
    return _table(["artifact kind", "n", "ctxgate (main)", "masking M=10"], rows)


def needle_table(results: EvalResults) -> list[str]:
    rows = []
    for place in PLACES:
        for depth in DEPTHS:
            key = f"{place}@{round(depth * 100)}%"
            ours = [
                a.retention.needles[key]
                for s in results.sessions
                if (a := _main(s)) and key in a.retention.needles
            ]
            mask = [
                s.masking.retention.needles[key]
                for s in results.sessions
                if s.masking.retention is not None and key in s.masking.retention.needles
            ]
            rows.append(
                [key, len(ours), frac((sum(ours), len(ours))), frac((sum(mask), len(mask)))]
            )
    return _table(["needle (place@depth)", "n", "ctxgate (main)", "masking M=10"], rows)


def probe_lines(probes: dict[str, Any] | None) -> list[str]:
    if probes is None:
        return []
    lines = ["", "### Real-model probes", ""]
    if probes.get("skipped"):
        return [*lines, f"Skipped: {probes['skipped']}"]
    lines += _table(
        ["context", "probes", "correct (string match)", "mean prompt tokens", "errors"],
        [
            [c["context"], c["n"], frac((c["correct"], c["n"])), c["prompt_tokens"], c["errors"]]
            for c in probes["contexts"]
        ],
    )
    return [*lines, "", probes.get("note", "")]


def _plan_note(cfg: EvalConfig) -> str:
    notes = [
        f"{w // 1024}K: {cfg.sessions_at(w)} session(s), {', '.join(cfg.arms_at(w))}"
        for w in cfg.windows
        if w in cfg.plan
    ]
    return f" ({'; '.join(notes)})" if notes else ""


def markdown(results: EvalResults) -> str:
    cfg = results.config
    lines = [
        "## ctxgate compression-quality evaluation",
        "",
        f"Windows {', '.join(f'{w:,}' for w in cfg.windows)} tokens; "
        f"{len(results.sessions)} sessions "
        f"(each ≥ {cfg.size_factor:g}× its window, {cfg.size_at(LARGE_WINDOW):g}× from "
        f"{LARGE_WINDOW // 1024}K); arms {', '.join(cfg.arms)}"
        f"{_plan_note(cfg)}; "
        f"{results.seconds:.0f} s on {platform.machine()} / Python {platform.python_version()}.",
        "Tokens are the provider simulator's count (o200k_base, tools included). Retention = "
        "verbatim presence in the last request ctxgate forwarded. The summary text comes from the "
        "simulator's deterministic summarizer, not a real model.",
        await_line(results),
        "",
        "### Tokens, fit and validity (arm main)",
        "",
        *tokens_table(results),
        "",
        "### Retention in the final forwarded view (arm main vs observation masking)",
        "",
        *retention_table(results),
        "",
        "Needle marks: 10% / 50% / 90% depth; ✓ kept, ✗ lost, · not planted.",
        "",
        "### Planted facts, recall and recoverable retention (per arm and window)",
        "",
        *lossless_table(results),
        "",
        "Facts: after the last turn the client asks about each planted fact through ctxgate; the "
        "simulator's recall model (tests/simulator/recall_model.py) answers from the view, or "
        "calls the `ctxgate_recall` tool when ctxgate offers it. *Via recall*: correct answers "
        "read from the archive. Retention counts the session's non-empty messages in the final "
        "forwarded view: *verbatim* as is, *recoverable* verbatim or named by a handle in view "
        "(`mN`) that ctxgate's archive (admin API) holds, *archived* verbatim or in the archive "
        "whether named or not, *lost* neither.",
        "",
        "### Arms (all sessions pooled)",
        "",
        *arms_table(results),
        "",
        "### Money with cache tiers (prompt side, default prices)",
        "",
        *money_table(results),
        "",
        MONEY_NOTE,
        "",
        "### Shadow agreement (per window)",
        "",
        *_table(SHADOW_HEADER, shadow_rows(results.sessions)),
        "",
        SHADOW_NOTE,
        "",
        "### By session kind (pooled)",
        "",
        *kinds_table(results),
        "",
        "User and constraint messages: verbatim in the final forwarded view, as in the tables "
        "above, split into coding-agent sessions (SWE-agent text and function calling, "
        "mini-swe-agent, OpenCode, aider) and chat or tool services (tau-bench airline). "
        "*Newest read in view at edit*: for each file edit of a coding session (found by "
        "compression/verbatim/fileops.py on the original history) that had an earlier read, "
        "whether the newest read's result was verbatim in the request the model answered "
        "with the edit. "
        "*Sessions whose user msgs fit*: every user message of the session fits the "
        "compressor's budget for them (`user_share` of the threshold, at most 60% of what the "
        "system prompt and tools leave); the *(fit)* columns count those sessions only. "
        "*Archive search*: up to 24 identifiers per session that the archive holds (record ids, "
        "paths, error names, planted codes), each searched through ctxgate's archive index "
        "once as `ID:` and once as `ID.`; a hit returns a message holding it"
        + missed_searches(results),
        "",
        "### Newest read in view at edit (coding sessions)",
        "",
        *edits_table(results),
        "",
        "Added latency: time through ctxgate minus a twin simulator's time for the same forwarded "
        "bytes, per turn (in-process harness: client, ctxgate and simulators share one Python "
        "process and 2 cores; see bench/overhead.py for the SPEC §10 figure).",
        "",
        "### Artifacts by kind (pooled)",
        "",
        *artifact_kind_table(results),
        "",
        "### Needles by place and depth (pooled)",
        "",
        *needle_table(results),
        *probe_lines(results.probes),
    ]
    return "\n".join(lines) + "\n"


def await_line(results: EvalResults) -> str:
    """How turns were timed: whether each waited for the session's background compression."""
    if not results.config.await_compression:
        return (
            f"Turns {results.config.gap_s * 1000:g} ms apart, not waiting for background "
            "compression (--no-await-compression): where a compression lands depends on the "
            "machine's speed."
        )
    arms = [a for s in results.sessions for a in s.arms.values()]
    shadows = [r for s in results.sessions for r in s.shadow]
    waits = sum(a.waits for a in arms) + sum(r.waits for r in shadows)
    late = sum(a.wait_timeouts for a in arms) + sum(r.wait_timeouts for r in shadows)
    return (
        "Before each next turn the client waited until the session's background compression had "
        f"landed (GET /admin/sessions/…/activity idle, at most 30 s): {waits} waits found one "
        f"pending or running, {late} timed out."
    )


def _arm_json(arm: ArmResult, keep_series: bool) -> dict[str, Any]:
    data = asdict(arm)
    values = data.pop("added_ms")
    data["added_ms"] = {
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values, default=None),
        "n": len(values),
    }
    if not keep_series:
        data.pop("tokens_per_turn")
    data["facts"] = list(arm.facts)
    data["recall_answers"] = arm.recall_answers
    data["recoverable"]["share"] = list(arm.recoverable.recoverable)
    return data


def to_json(results: EvalResults) -> dict[str, Any]:
    config = asdict(results.config)
    config["corpus"] = str(config["corpus"]) if config["corpus"] else None
    sessions = []
    for s in results.sessions:
        item = asdict(s)
        item["arms"] = {name: _arm_json(arm, name == MAIN) for name, arm in s.arms.items()}
        sessions.append(item)
    return {
        "config": config,
        "arms": {name: ARMS[name].description for name in results.config.arms},
        "seconds": results.seconds,
        "sessions": sessions,
        "by_kind": kinds_json(results),
        "probes": results.probes,
        "shadow": shadow_pooled(results.sessions),
    }


def write(results: EvalResults, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = {"json": out / "eval.json", "md": out / "eval.md"}
    written["json"].write_text(json.dumps(to_json(results), indent=1, default=str) + "\n")
    written["md"].write_text(markdown(results))
    png = plot(results, out / "eval.png")
    if png is not None:
        written["png"] = png
    return written
