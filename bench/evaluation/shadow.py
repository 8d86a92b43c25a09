"""Shadow agreement: would a model that acts on what is in view take the same next action
with ctxgate's compressed view as with the full history?

The session is replayed once more through ctxgate (main arm's options) with shadow checks on
every compressed request (sample rate 1, a budget that never runs out), and its ordinary turns
are answered by the simulator's in-view model (tests/simulator/in_view.py): it needs the
planted facts as ``NAME: value`` lines (a needle in a user message is an instruction of the
user's, one in a tool output a fact), and with one missing from its view it searches for it
instead of taking the task's next step. Deterministic (``noise=0``) and sampled (``noise>0``)
variants. B vs A (agreement) and A' vs A (noise floor) are read from ``GET /admin/savings``.

Only requests whose uncompressed history fits the window can be checked, so the replay stops
at the first turn past the window: the rest would cost time and check nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bench.evaluation.baselines import full_history
from bench.evaluation.corpus import Session
from bench.evaluation.replay import Replay, _responder, replay
from tests.simulator import Fail, InViewModel, Need, Reply, is_summary_request
from tests.simulator.agent import shell_tool

MAX_TOKENS = 256  # compression.shadow.max_tokens: enough for the in-view model's command
BUDGET = 10**12  # compression.shadow.daily_tokens: never the limit here
VARIANTS: dict[str, float] = {"deterministic": 0.0, "sampled": 0.2}  # variant -> noise


@dataclass
class ShadowResult:
    variant: str
    noise: float
    needs: list[str]  # the `NAME: value` lines the model needs
    turns: int  # turns replayed (up to the first past the window)
    checks: int
    agreements: int  # B took A's action
    noise_agreements: int  # A' took A's action
    tokens: int  # billed to shadow calls
    waits: int = 0  # turns that waited for a background compression (replay.Wait)
    wait_timeouts: int = 0

    @property
    def agreement(self) -> float | None:
        return self.agreements / self.checks if self.checks else None

    @property
    def noise_floor(self) -> float | None:
        return self.noise_agreements / self.checks if self.checks else None


def _name(subject: str) -> str:
    return subject.removeprefix("the ").upper().replace(" ", "_")


def shadow_session(session: Session) -> tuple[Session, tuple[Need, ...]]:
    """A copy of `session` cut after its first turn past the window, each needle in it also
    written as a ``NAME: value`` line; the needs in the order they appear."""
    points = session.points()
    tokens = full_history(session).tokens
    past = next((i for i, t in enumerate(tokens) if t + MAX_TOKENS > session.window), None)
    end = points[past] + 1 if past is not None else len(session.messages)
    messages = copy.deepcopy(session.messages[:end])
    needs: list[Need] = []
    for needle in sorted(session.needles, key=lambda n: n.index):
        if needle.index >= end:
            continue
        kind = "RULE" if needle.place == "user" else "FACT"
        need = Need(f"{kind}_{_name(needle.subject)}", needle.code, _name(needle.subject).lower())
        message = messages[needle.index]
        message["content"] = f"{message['content']}\n{need.line}"
        needs.append(need)
    cut = replace(
        session,
        messages=messages,
        stated=[i for i in session.stated if i < end],
        observations=[i for i in session.observations if i < end],
        needles=[n for n in session.needles if n.index < end],
        _tokens=None,
    )
    return cut, tuple(needs)


def in_view_responder(
    model: InViewModel, summarizer: str = "fit"
) -> Callable[[dict[str, Any]], Reply | Fail | None]:
    """Ordinary turns: the in-view model's tool call (the request's shell tool, else its first
    tool, else `bash`: recorded sessions do not all offer a shell). Summaries as the arm's."""
    summaries = _responder(summarizer)

    def respond(body: dict[str, Any]) -> Reply | Fail | None:
        if is_summary_request(body):
            return summaries(body)
        return model.reply(body, shell_tool(body) or _first_tool(body) or "bash")

    return respond


def _first_tool(body: dict[str, Any]) -> str | None:
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


def shadow_settings() -> dict[str, Any]:
    return {"enabled": True, "sample_rate": 1.0, "daily_tokens": BUDGET, "max_tokens": MAX_TOKENS}


def shadow_result(variant: str, noise: float, needs: tuple[Need, ...], run: Replay) -> ShadowResult:
    total = ((run.savings or {}).get("shadow") or {}).get("total") or {}
    checks = int(total.get("samples") or 0)
    agreement = total.get("agreement") or 0.0
    noise_floor = total.get("noise_floor_agreement") or 0.0
    return ShadowResult(
        variant,
        noise,
        [n.line for n in needs],
        len(run.turns),
        checks,
        round(agreement * checks),
        round(noise_floor * checks),
        int(total.get("tokens") or 0),
        sum(1 for w in run.waits if w.waited),
        sum(1 for w in run.waits if w.timed_out),
    )


def measure(
    session: Session,
    options: dict[str, Any],
    summarizer: str = "fit",
    background: bool = True,
    await_compression: bool = True,
) -> list[ShadowResult]:
    """Both variants' shadow replays of `session` (the arm's options and summarizer)."""
    cut, needs = shadow_session(session)
    results = []
    for variant, noise in VARIANTS.items():
        model = InViewModel(needs, noise=noise, seed=0)
        run = replay(
            cut,
            background=background,
            summarizer=summarizer,
            options=options,
            measure_direct=False,
            probe=False,
            responder=in_view_responder(model, summarizer),
            shadow=shadow_settings(),
            await_compression=await_compression,
        )
        results.append(shadow_result(variant, noise, needs, run))
    return results


def shadow_pooled(sessions: list[Any]) -> list[dict[str, Any]]:
    """Per window and variant, pooled over sessions: checks, B-vs-A agreement, A'-vs-A floor."""
    pooled = []
    for window in sorted({s.window for s in sessions if s.shadow}):
        for variant, noise in VARIANTS.items():
            mine = [r for s in sessions if s.window == window for r in s.shadow]
            mine = [r for r in mine if r.variant == variant]
            checks = sum(r.checks for r in mine)
            agreed = sum(r.agreements for r in mine)
            floor = sum(r.noise_agreements for r in mine)
            pooled.append({
                "window": window, "variant": variant, "noise": noise, "sessions": len(mine),
                "checks": checks, "agreements": agreed, "noise_agreements": floor,
                "agreement": agreed / checks if checks else None,
                "noise_floor": floor / checks if checks else None,
            })  # fmt: skip
    return pooled


def shadow_rows(sessions: list[Any]) -> list[list[Any]]:
    return [
        [f"{p['window'] // 1024}K", f"{p['variant']} (noise {p['noise']:g})", p["sessions"],
         p["checks"], _pct(p["agreements"], p["checks"]), _pct(p["noise_agreements"], p["checks"])]
        for p in shadow_pooled(sessions)
    ]  # fmt: skip


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "–"


SHADOW_HEADER = ["window", "model variant", "sessions", "checks", "B vs A agreement",
                 "A\u2032 vs A noise floor"]  # fmt: skip
SHADOW_NOTE = (
    "Shadow agreement: each session replayed once more (arm main's options, up to its first "
    "turn past the window) with ctxgate's shadow checks on every compressed request; ordinary "
    "turns answered by the simulator's in-view model (tests/simulator/in_view.py), which needs "
    "the planted facts as `NAME: value` lines (user-message needles as instructions, tool-output "
    "ones as facts) and searches for one missing from its view instead of taking the next step. "
    "B vs A: the compressed request's action equals the uncompressed one's; A\u2032 vs A: the "
    "uncompressed request sent twice (the noise floor: 100% for the deterministic variant). "
    "Read from GET /admin/savings."
)
