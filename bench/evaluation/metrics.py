"""Deterministic metrics of one replay (an "arm") and of the counted baselines."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.evaluation.artifacts import extract, retained, view_text
from bench.evaluation.baselines import ArmSeries, masked_view
from bench.evaluation.corpus import Message, Session
from bench.evaluation.edits import edit_reads, edits_of
from bench.evaluation.needles import needle_key
from bench.evaluation.recall import ProbeOutcome
from bench.evaluation.recoverable import Recoverable, recoverable_of
from bench.evaluation.replay import Replay
from compression import (
    USER_CLOSE,
    USER_OPEN,
    CompressionInvariantError,
    CompressorOptions,
    budgets_for,
    check_invariants,
    handoff_text,
    limits_for,
    parse_handoff,
)
from tests.simulator import Received
from tests.simulator.tokens import count_text, message_tokens

Fraction = tuple[int, int]  # (kept, total)


@dataclass
class Retention:
    """What of the client's history is still present, verbatim, in one final view."""

    user: Fraction
    original_request: bool  # the session's first user message (where the task was stated)
    original_head: bool  # at least its opening (a long request may be carried clipped)
    constraints: Fraction  # user messages stating a rule or preference ("never…", "only…")
    observations_carried: int  # tool outputs sent as `user` that a summary carried as user words
    artifacts: dict[str, Fraction]
    needles: dict[str, bool]  # "user@10%" -> present


@dataclass
class ArmResult:
    arm: str
    turns: int
    client_errors: int
    client_overflows: int
    provider_refusals: int  # overflow errors the provider sent to ctxgate (recovered or not)
    forwarded: int  # chat requests ctxgate sent upstream, summaries included
    invalid: int  # of those, failing check_invariants or the provider's tool-pairing check
    billed: int  # prompt tokens of answered requests, summary calls included
    billed_summary: int
    cached_prefix: int  # tokens each request shares with the previous one (prompt-cache hits)
    compressions: dict[str, int]  # "trigger/outcome" -> count, from ctxgate's event store
    added_ms: list[float]
    sync_turns: int  # turns whose response said a compression ran while the client waited
    tokens_per_turn: list[int]  # what the provider counted for each turn's forwarded request
    retention: Retention
    newest_user: Fraction  # turns forwarding the newest user message verbatim
    errors: list[str] = field(default_factory=list)
    recoverable: Recoverable = field(default_factory=Recoverable)  # of the final view
    probes: list[ProbeOutcome] = field(default_factory=list)  # planted-fact questions
    edits: int = 0  # file edits in the session (coding sessions)
    # edits whose file's newest read was verbatim in the request answered with the edit,
    # of the edits that had an earlier read
    edit_reads: Fraction = (0, 0)
    # archive searches for an identifier followed by ":" or "." that found it (search_hits.py)
    search_hits: Fraction = (0, 0)
    search_missed: list[str] = field(default_factory=list)
    user_words_fit: bool = False  # every user message fits the compressor's budget for them
    # waits for a background compression before a turn or question (none with await off):
    # how many found one pending or running, how many gave up at the timeout, seconds waited
    waits: int = 0
    wait_timeouts: int = 0
    waited_s: float = 0.0

    @property
    def facts(self) -> Fraction:
        return sum(p.correct for p in self.probes), len(self.probes)

    @property
    def recall_answers(self) -> int:
        """Correct answers the model gave after reading ctxgate's archive."""
        return sum(1 for p in self.probes if p.correct and p.recall_calls)


@dataclass
class BaselineResult:
    total: int
    fits: int  # turns whose request fits the window
    first_unfit: int | None  # turn index of the first request over the window
    cached_prefix: int
    tokens_per_turn: list[int]
    retention: Retention | None = None


# The evaluation's own reading of "states a constraint", narrower than the compressor's.
CONSTRAINT = re.compile(
    r"\b(?:must|never|always|do not|don[’']t|only|without|make sure|prefer|avoid)\b", re.I
)
HEAD_CHARS = 120


def retention_of(session: Session, end: int, view: Sequence[Message]) -> Retention:
    """Compare the history `messages[:end]` with what a model would read in `view`."""
    text = view_text(view)
    history = session.messages[:end]
    stated = [
        m["content"]
        for m in (session.messages[i] for i in session.stated if i < end)
        if isinstance(m.get("content"), str)
    ]
    kept = [content in text for content in stated]
    rules = [content in text for content in stated if CONSTRAINT.search(content)]
    needles = {
        needle_key(n.place, n.depth): n.code in text for n in session.needles if n.index < end
    }
    return Retention(
        user=(sum(kept), len(stated)),
        original_request=bool(kept and kept[0]),
        original_head=bool(stated and stated[0][:HEAD_CHARS].strip() in text),
        constraints=(sum(rules), len(rules)),
        observations_carried=_observations_carried(session, end, view),
        artifacts=retained(extract(history), text),
        needles=needles,
    )


def _observations_carried(session: Session, end: int, view: Sequence[Message]) -> int:
    carried = []
    for message in view:
        summary = handoff_text(message)
        parsed = parse_handoff(summary) if summary is not None else None
        if parsed is not None:
            carried.extend(parsed.handoff.user_messages)
    words = "\n".join(carried)
    observations = (session.messages[i].get("content") for i in session.observations if i < end)
    return sum(1 for o in observations if isinstance(o, str) and o.strip() and o in words)


def newest_user_kept(session: Session, replay: Replay) -> Fraction:
    """Turns whose forwarded request holds the newest user message verbatim (SPEC 5.3)."""
    kept = total = 0
    for turn in replay.turns:
        if turn.forwarded is None:
            continue
        users = [m for m in session.messages[: turn.end] if m.get("role") == "user"]
        if not users or not isinstance(users[-1].get("content"), str):
            continue
        total += 1
        kept += users[-1]["content"] in view_text(turn.forwarded.messages)
    return kept, total


def _valid(request: Received) -> bool:
    if request.problems:
        return False
    try:
        check_invariants(request.messages)
    except CompressionInvariantError:
        return False
    return True


def _common_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    n = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        n += 1
    return n


def _cached_prefix(forwarded: Sequence[Received | None], fixed: int) -> int:
    """Tokens shared with the previous forwarded request (tools and priming count as shared)."""
    total = 0
    previous: list[Message] | None = None
    for request in forwarded:
        messages = request.messages if request is not None else None
        if messages is not None and previous is not None:
            shared = _common_prefix(previous, messages)
            total += fixed + sum(message_tokens(m) for m in messages[:shared])
        previous = messages
    return total


def _final(replay: Replay) -> tuple[int, list[Message]]:
    for turn in reversed(replay.turns):
        if turn.forwarded is not None:
            return turn.end, turn.forwarded.messages
    return 0, []


def _text(message: Message) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def user_words_fit(session: Session, options: Mapping[str, Any]) -> bool:
    """Whether every user message of the session fits the compressor's budget for them
    (`user_share` of the threshold, at most 60% of what the system prompt and tools leave)."""
    engine = CompressorOptions.from_mapping(options)
    limits = limits_for(engine, session.window, None)
    fixed = session.tools_tokens() + message_tokens(session.messages[0])
    # Each carried message costs its delimiters beyond its text.
    overhead = count_text(f"{USER_OPEN}\n\n{USER_CLOSE}\n")
    words = sum(count_text(_text(session.messages[i])) + overhead for i in session.stated)
    return budgets_for(engine, limits, fixed, 0, words).carry >= words


def arm_result(
    arm: str, session: Session, replay: Replay, options: Mapping[str, Any] | None = None
) -> ArmResult:
    answered = [r for r in replay.requests if r.status == 200]
    end, view = _final(replay)
    errors = [t.error for t in replay.turns if t.error]
    return ArmResult(
        arm=arm,
        turns=len(replay.turns),
        client_errors=len(errors),
        client_overflows=sum(1 for t in replay.turns if t.overflow),
        provider_refusals=sum(1 for r in replay.requests if r.outcome == "overflow"),
        forwarded=len(replay.requests),
        invalid=sum(1 for r in replay.requests if not _valid(r)),
        billed=sum(r.prompt_tokens or 0 for r in answered),
        billed_summary=sum(r.prompt_tokens or 0 for r in answered if r.is_summary),
        cached_prefix=_cached_prefix(
            [t.forwarded for t in replay.turns], session.tools_tokens() + 3
        ),
        compressions=dict(Counter(f"{trigger}/{outcome}" for trigger, outcome in replay.events)),
        added_ms=[t.added_ms for t in replay.turns if t.added_ms is not None],
        sync_turns=sum(1 for t in replay.turns if t.sync_compression),
        tokens_per_turn=[
            (t.forwarded.prompt_tokens or 0) if t.forwarded is not None else 0 for t in replay.turns
        ],
        retention=retention_of(session, end, view),
        newest_user=newest_user_kept(session, replay),
        errors=[str(e) for e in errors[:3]],
        recoverable=recoverable_of(session.messages[:end], view, replay.archive),
        probes=replay.probes,
        edits=edits_of(session),
        edit_reads=edit_reads(session, replay.turns),
        search_hits=replay.search_hits,
        search_missed=replay.search_missed,
        user_words_fit=user_words_fit(session, options or {}),
        waits=sum(1 for w in replay.waits if w.waited),
        wait_timeouts=sum(1 for w in replay.waits if w.timed_out),
        waited_s=sum(w.seconds for w in replay.waits),
    )


def baseline_result(
    session: Session, series: ArmSeries, final_view: list[Message] | None = None
) -> BaselineResult:
    unfit = [i for i, t in enumerate(series.tokens) if t > session.window]
    end = session.points()[-1]
    return BaselineResult(
        total=series.total(),
        fits=series.fits(session.window),
        first_unfit=unfit[0] if unfit else None,
        cached_prefix=sum(series.cached_prefix),
        tokens_per_turn=series.tokens,
        retention=retention_of(session, end, final_view) if final_view is not None else None,
    )


def masking_result(session: Session, series: ArmSeries) -> BaselineResult:
    return baseline_result(session, series, masked_view(session, session.points()[-1]))
