"""The built-in context engine: prune, cut, summarize, assemble, verify.

    plan (pure) -> summary call (the only I/O) -> assemble + sanitize (pure) -> invariants

A pass either commits a smaller view ("compressed", `summary_truncated` when the model's
summary was cut at its output limit; or "fallback" when the summary model failed and a
mechanical summary stood in) or returns the input unchanged with the reason
("skipped", "noop", "aborted", "rejected"). Every decision that must outlive the request is
in the returned `EngineState`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compression.assembly.invariants import CompressionInvariantError, check_invariants
from compression.assembly.planning import (
    ANCHOR_FLOOR_SHARE,
    MARKER_TOKENS,
    MAX_LEVEL,
    OPENING_SHARE,
    TARGET_SHARE,
    Budgets,
    CutPlan,
    budgets_for,
    head_end,
    plan_cut,
    summary_tokens,
    worth_summarizing,
    yielded,
)
from compression.assembly.splice import assemble
from compression.counting.figures import PassFigures
from compression.engine import ClippedMessage, CompressionContext, CompressionResult, Outcome
from compression.messages.content import content_text
from compression.messages.toolpairs import (
    ToolPairing,
    pair_tool_calls,
    sanitize_tool_pairs,
    tool_calls_of,
)
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.pruning.passes import clip_outputs, prune_messages
from compression.state import (
    EngineState,
    blocked_reason,
    start_attempt,
    with_committed,
    with_failure,
    with_noop,
    with_strike,
    with_summary_success,
    without_foreign_summary,
)
from compression.summary.failures import SummaryFailure, cooldown_seconds
from compression.summary.handoff import (
    Handoff,
    handoff_text,
    render_working,
    user_text,
    view_summaries,
)
from compression.summary.middle import MiddleSummary, summarize_middle
from compression.thresholds import Limits, limits_for
from compression.verbatim.carry import (
    YIELD_ANCHOR_DIVISOR,
    YIELD_ANCHOR_TOKENS,
    carry_need,
    carry_section,
    yield_floor,
)
from compression.verbatim.fileops import FileOp, file_ops
from compression.verbatim.observations import observation_indices
from compression.verbatim.pins import PinPlan, find_pins, plan_pins
from compression.verbatim.preamble import fixed_end
from compression.verbatim.reads import (
    FileRead,
    files_need,
    newest_reads,
    read_candidates,
    select_files,
)
from compression.verbatim.reads import superseded as superseded_reads
from compression.verbatim.usermessages import UserMessages, user_messages
from compression.verbatim.userwords import Selection
from compression.verbatim.workingset import WorkingSet, working_set

log = logging.getLogger(__name__)

TRUNCATED_NOTE = (
    "the summary stopped at the summary model's output limit; kept up to its last complete line"
)
CLIPPED_NOTE = "nothing but the protected opening was left: its tool outputs were clipped"


@dataclass(frozen=True, slots=True)
class _Pass:
    """Everything one compression pass reads, computed once."""

    view: list[Message]
    ctx: CompressionContext
    options: CompressorOptions
    limits: Limits
    figures: PassFigures
    pairing: ToolPairing
    figure: int  # the caller's real/anchored token figure, else the estimate
    pins: PinPlan = PinPlan()  # client-placed content every compressed view keeps
    ops: tuple[FileOp, ...] = ()  # the files the view reads and edits
    reads: tuple[FileRead, ...] = ()  # the newest read of each file
    working: WorkingSet = WorkingSet()  # what the conversation works on, ranked
    words: UserMessages | None = None  # the user's messages as the carry reads them

    @property
    def calibration(self) -> float:
        if self.ctx.current_tokens is None or self.figures.total <= 0:
            return 1.0
        return min(max(self.figure / self.figures.total, 0.5), 2.0)

    def unchanged(
        self,
        outcome: Outcome,
        state: EngineState,
        error: str | None = None,
        failure_class: str | None = None,
    ) -> CompressionResult:
        return CompressionResult(
            messages=self.view,
            outcome=outcome,
            state=state,
            tokens_before=self.figure,
            tokens_after=self.figure,
            error=error,
            failure_class=failure_class,
        )


class Compressor:
    """The built-in engine (`compression.engine: compressor`)."""

    name = "compressor"

    def __init__(self, options: CompressorOptions | None = None) -> None:
        self.options = options or CompressorOptions()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Compressor:
        return cls(CompressorOptions.from_mapping(options))

    def limits(self, context_length: int, max_output_tokens: int | None) -> Limits:
        return limits_for(self.options, context_length, max_output_tokens)

    async def compress(
        self, messages: Sequence[Message], ctx: CompressionContext
    ) -> CompressionResult:
        view = list(messages)
        figures = PassFigures.measure(view, ctx.counter, ctx.tools)
        run = _Pass(
            view=view,
            ctx=ctx,
            options=self.options,
            limits=self.limits(ctx.context_length, ctx.max_output_tokens),
            figures=figures,
            pairing=pair_tool_calls(view),
            figure=ctx.current_tokens if ctx.current_tokens is not None else figures.total,
        )
        state = without_foreign_summary(ctx.state, view_summaries(view))
        reason = _skip_reason(run, state)
        if reason is not None:
            return run.unchanged("skipped", state, reason)
        state = start_attempt(state)
        too_large = _fixed_part_too_large(run)
        if too_large is not None:
            return run.unchanged("rejected", with_strike(state, ctx.now), too_large)
        ops = tuple(file_ops(view))
        reads = tuple(newest_reads(view, ops))
        observations = observation_indices(view, 0, len(view))
        run = replace(
            run,
            pins=_pins(run),
            ops=ops,
            reads=reads,
            working=working_set(view, ops, observations),
            words=user_messages(view, figures, observations, ctx.originals),
        )
        if run.pins.refused is not None:
            return run.unchanged("rejected", with_strike(state, ctx.now), run.pins.refused)
        plan = _plan(run, state)
        pinned = sum(figures.tokens[i] for i in _lifted(run, plan))
        if not worth_summarizing(plan, figures, run.limits.threshold, pinned):
            clipped = _clipped(run, state) if ctx.force else None
            if clipped is not None:
                return clipped
            return run.unchanged("noop", with_noop(state, ctx.now), "nothing to compress")
        hopeless = _hopeless(run, plan)
        if hopeless is not None:
            clipped = _clipped(run, state) if ctx.force else None
            if clipped is not None:
                return clipped
            return run.unchanged("rejected", with_strike(state, ctx.now), hopeless)
        summary = await summarize_middle(view, ctx, self.options, figures, run.pairing, plan, state)
        if summary.calibration is not None:
            state = replace(state, summary_calibration=summary.calibration.to_dict())
        if summary.body is None:
            failure = summary.failure
            assert failure is not None  # a summary without a body always says why
            state = _failed(run, state, failure)
            return run.unchanged("aborted", state, failure.describe(), failure.kind)
        state = _summary_state(run, state, summary)
        try:
            return _finish(run, plan, summary, summary.body, state)
        except CompressionInvariantError as error:
            # A bug, never a result: the caller goes on with the view it had.
            log.error("compressed view failed the invariant check: %s", error)
            return run.unchanged("aborted", state, f"internal error: {error}", "invariant")


def _skip_reason(run: _Pass, state: EngineState) -> str | None:
    if not run.view:
        return "empty view"
    if run.ctx.force or run.ctx.trigger == "hygiene":
        return None
    if not run.ctx.due and run.figure < run.limits.threshold:
        return f"under the threshold ({run.figure:,} < {run.limits.threshold:,} tokens)"
    return blocked_reason(state, run.ctx.now)


def _pins(run: _Pass) -> PinPlan:
    """The pinned messages of the view and what of them fits (see `compression.verbatim.pins`)."""
    options, figures = run.options, run.figures
    found = find_pins(
        run.view, figures.tokens, options.pin_paste_tokens, figures.counter.count_text
    )
    if not found:
        return PinPlan()
    return plan_pins(found, int(run.limits.threshold * options.pin_share), figures.message)


def _lifted(run: _Pass, plan: CutPlan) -> list[int]:
    """The pinned messages of the plan's summarized middle: kept, right before the summary."""
    return sorted(i for i in run.pins.indices if plan.head_end <= i < plan.tail_start)


def _plan(run: _Pass, state: EngineState) -> CutPlan:
    """The least aggressive plan whose estimated result fits under the target."""
    decayed = state.compression_count > 0 or any(handoff_text(m) is not None for m in run.view)
    cap = int(run.limits.threshold * OPENING_SHARE)
    # Pinned content has its own budget: it does not push the rest of an opening out.
    pinned = run.pins.indices
    unpinned = [0 if i in pinned else size for i, size in enumerate(run.figures.tokens)]
    fixed = fixed_end(run.view, unpinned, cap)
    head = head_end(run.view, run.options.protect_first_n, decayed, fixed)
    fixed = run.figures.base + run.figures.span(0, head) + run.pins.tokens_in(head, len(run.view))
    users = carry_need(run.view, head, run.figures, run.pins.indices, run.words)
    files = files_need(run.reads, head, run.figures.counter.count_text)
    # The threshold is in the provider's tokens, the plan's figures in ours: where the
    # provider counts more, the plan aims that much lower.
    ratio = max(1.0, run.calibration)
    limits = replace(run.limits, threshold=int(run.limits.threshold / ratio))
    plan: CutPlan | None = None
    for level in range(min(state.strikes, MAX_LEVEL), MAX_LEVEL + 1):
        budgets = budgets_for(run.options, limits, fixed, level, users.total, files, users.origin)
        candidate = plan_cut(run.view, run.figures, run.pairing, head, budgets, level)
        if candidate.empty:
            continue
        plan = candidate
        if _estimate(run, candidate) <= budgets.target:
            break
    return plan or plan_cut(
        run.view,
        run.figures,
        run.pairing,
        head,
        budgets_for(run.options, limits, fixed, MAX_LEVEL, users.total, files, users.origin),
        MAX_LEVEL,
    )


def _estimate(run: _Pass, plan: CutPlan, *, with_summary: bool = True) -> int:
    """Tokens of the planned view; without the summary it is a floor no summary can beat."""
    figures = run.figures
    extra = sum(figures.tokens[i] for i in (plan.restate, plan.reply) if i is not None)
    extra += run.pins.tokens_in(plan.head_end, plan.tail_start)
    summary = summary_tokens(run.options, plan, figures, run.limits.context_length)
    handoff = summary + MARKER_TOKENS + plan.budgets.carry + plan.budgets.files
    return (
        figures.base
        + figures.span(0, plan.head_end)
        + figures.span(plan.tail_start, len(run.view))
        + (handoff if with_summary else 0)
        + extra
    )


def _hopeless(run: _Pass, plan: CutPlan) -> str | None:
    """Why no summary could make this plan acceptable (so none is requested), if so."""
    if plan.level < MAX_LEVEL:
        return None
    floor = _estimate(run, plan, with_summary=False)
    if floor >= run.figures.total:
        return f"the messages that must stay verbatim ({floor:,} tokens) are not smaller"
    limit = _limit(run)
    projected = int(floor * run.calibration)  # in the provider's tokens, like the limit
    if not run.ctx.force and projected >= limit:
        return f"the messages that must stay verbatim ({projected:,} tokens) are over {limit:,}"
    return None


def _clipped(run: _Pass, state: EngineState) -> CompressionResult | None:
    """A forced pass with nothing to summarize: the view with its tool outputs clipped until
    it fits under the target (None when that removes nothing)."""
    figures = run.figures
    target = int(run.limits.threshold * TARGET_SHARE / run.calibration)
    clipped = clip_outputs(
        run.view, figures.tokens, figures.total - target, run.options, run.pairing
    )
    if not clipped.pruned:
        return None
    result = clipped.messages
    after = figures.view(result)
    if after >= figures.total:
        return None
    check_invariants(result)
    projected = int(after * run.calibration)
    return CompressionResult(
        messages=result,
        outcome="compressed",
        state=with_committed(state, state.previous_summary, projected),
        tokens_before=run.figure,
        tokens_after=projected,
        pruned=len(clipped.pruned),
        replaced_upto=_replaced_upto(run.view, result),
        error=CLIPPED_NOTE,
    )


def _fixed_part_too_large(run: _Pass) -> str | None:
    """Why no compression can make the request fit: the part it never touches (the system
    and developer messages at the start, the tool definitions) alone fills the window."""
    end = 0
    while end < len(run.view) and run.view[end].get("role") in ("system", "developer"):
        end += 1
    fixed = int((run.figures.base + run.figures.span(0, end)) * run.calibration)
    window = run.limits.window
    if fixed < window:
        return None
    reserved = run.limits.context_length - window
    room = f"the {window:,} tokens the model's window leaves for the prompt" + (
        f" ({run.limits.context_length:,} less {reserved:,} reserved for output)"
        if reserved
        else ""
    )
    return (
        f"the system prompt and tool definitions alone take {fixed:,} tokens, over {room}; "
        "compressing the conversation cannot make the request fit: shorten them or use a model "
        "with a larger window"
    )


def _anchor_room(run: _Pass, budgets: Budgets, after: int, limit: int) -> int:
    """Tokens the anchors may take beyond their planned budget: up to a floor (a share of the
    threshold) where the assembled view leaves that much under the pass's limit. Where the
    system prompt and tools take most of the threshold, the plan leaves them nothing, while a
    hygiene pass has the room up to its own line: the exact ids of the compacted turns then
    stay in view instead of only in the archive. The view still shrinks by a tenth at least."""
    floor = min(run.options.max_anchor_tokens, int(run.limits.threshold * ANCHOR_FLOOR_SHARE))
    ceiling = min(int(limit / run.calibration), run.figures.total) * TARGET_SHARE
    headroom = int(ceiling) - after
    return max(0, min(floor - budgets.anchors, headroom))


def _limit(run: _Pass) -> int:
    """The size a result must stay under (hygiene passes only need to clear the hygiene line)."""
    return run.limits.hygiene_tokens if run.ctx.trigger == "hygiene" else run.limits.threshold


def _failed(run: _Pass, state: EngineState, failure: SummaryFailure) -> EngineState:
    streak = state.failure_streak.get(failure.kind, 0) + 1
    seconds = cooldown_seconds(failure.kind, streak, run.options.cooldowns)
    return with_failure(state, failure.kind, seconds, run.ctx.now)


def _summary_state(run: _Pass, state: EngineState, summary: MiddleSummary) -> EngineState:
    if summary.failure is None:
        return with_summary_success(state)
    if run.ctx.summarize is None:
        return state  # nothing failed: the deployment runs without a summary model
    return _failed(run, state, summary.failure)


def _finish(
    run: _Pass, plan: CutPlan, summary: MiddleSummary, body: str, state: EngineState
) -> CompressionResult:
    view, figures, options = run.view, run.figures, run.options
    pinned = run.pins.apply(view)  # pinned messages as kept: verbatim, or their clips
    lifted = _lifted(run, plan)
    # Before the summary, not after it: the summary changes at every compression, so what
    # follows it is never a cached prefix, while the head and unchanged pins stay one.
    head = [*pinned[: plan.head_end], *(pinned[i] for i in lifted)]
    tail, demoted = _tail(run, plan, pinned)
    restate = view[plan.restate] if plan.restate is not None else None
    reply = content_text(view[plan.reply]) if plan.reply is not None else None
    limit = _limit(run)
    kept: list[Message | str] = [*head, *tail, *([restate] if restate else [])]
    count = run.ctx.counter.count_text
    # An earlier handoff the view keeps (a restated message merged into one) is replaced by
    # this one: what it carried is not kept by it.
    kept_text = "\n".join(i if isinstance(i, str) else user_text(i) for i in kept)
    files = select_files(
        read_candidates(run.reads, plan.head_end, plan.tail_start),
        plan.budgets.files,
        count,
        kept_text.__contains__,
        run.working,
    )
    working = run.working.carried()
    # What the files leave of their budget goes to the user's words; the working set's lines
    # come out of the anchors' (they name the same things, with why).
    spare = max(0, plan.budgets.files - files.tokens)
    lines = count(render_working(working))
    budgets = replace(plan.budgets, carry=plan.budgets.carry + spare)
    budgets = replace(budgets, anchors=max(0, budgets.anchors - lines))
    carrying = replace(plan, budgets=budgets)
    for attempt in range(4):  # room for the anchors, a trim, a yield, the view that fits
        users, anchors = carry_section(
            view,
            carrying,
            figures,
            options,
            count,
            kept,
            frozenset(lifted),
            (body, reply or ""),
            run.working,
            run.words,
        )
        handoff = Handoff(body, users.texts, reply, anchors, files.files, working)
        result = sanitize_tool_pairs(assemble(head, handoff, restate, tail))
        after = figures.view(result)
        projected = int(after * run.calibration)
        extra = _anchor_room(run, carrying.budgets, after, limit) if attempt == 0 else 0
        if extra > 0:
            anchored = replace(carrying.budgets, anchors=carrying.budgets.anchors + extra)
            carrying = replace(carrying, budgets=anchored)
            continue
        if after >= figures.total and attempt < 3:
            # A short region leaves its anchors' kept share more than the turns it replaces
            # held: they give up what makes the view no smaller than the input.
            over = after - int(figures.total * TARGET_SHARE)
            trimmed = replace(carrying.budgets, anchors=max(0, carrying.budgets.anchors - over))
            if trimmed != carrying.budgets:
                carrying = replace(carrying, budgets=trimmed)
                continue
        if projected < limit or not users.texts or plan.level < MAX_LEVEL:
            break
        # The most the cut could shrink is done and the view is still over: the user's words
        # carried verbatim yield (clipped, with their handle) so that it fits, down to the
        # original request's first lines.
        over = math.ceil((projected - int(limit * TARGET_SHARE)) / run.calibration)
        # What the anchors keep of their own scales with the window: at a few thousand
        # tokens, every token of the handoff decides whether the pass fits.
        anchor_floor = min(YIELD_ANCHOR_TOKENS, limit // YIELD_ANCHOR_DIVISOR)
        given = yielded(carrying.budgets, over, yield_floor(count), anchor_floor)
        if given == carrying.budgets:
            break
        carrying = replace(carrying, budgets=given)
    check_invariants(result)
    if after >= figures.total or (not run.ctx.force and projected >= limit):
        why = (
            "the compressed view is not smaller than the input"
            if after >= figures.total
            else f"the compressed view ({projected:,} tokens) is not under {limit:,}"
        )
        return run.unchanged("rejected", with_strike(state, run.ctx.now), why)
    outcome: Outcome = "compressed" if summary.failure is None else "fallback"
    note = summary.failure.describe() if summary.failure is not None else None
    if summary.truncated:
        note = TRUNCATED_NOTE
    return CompressionResult(
        messages=result,
        outcome=outcome,
        state=with_committed(state, body, projected),
        tokens_before=run.figure,
        tokens_after=projected,
        summary=body,
        pruned=summary.pruned + demoted,
        summarized=plan.tail_start - plan.head_end,
        replaced_upto=_replaced_upto(view, result),
        error=note,
        failure_class=summary.failure.kind if summary.failure is not None else None,
        summary_truncated=summary.truncated,
        clipped=run.pins.clipped
        + _shortened(users)
        + tuple(ClippedMessage(c.at, c.kept, c.original) for c in files.clipped),
    )


def _shortened(users: Selection) -> tuple[ClippedMessage, ...]:
    """The user messages the handoff holds clipped, or only names, for the response to say."""
    return tuple(
        ClippedMessage(item.index, item.kept, item.original)
        for item in users.shortened
        if item.index is not None
    )


def _tail(run: _Pass, plan: CutPlan, view: list[Message]) -> tuple[list[Message], int]:
    """The verbatim tail, but for reads a newer read of the same file supersedes; at the most
    aggressive level, its older tool results are demoted."""
    view = superseded_reads(view, plan.tail_start, run.ops)
    if plan.level < MAX_LEVEL:
        return view[plan.tail_start :], 0
    newest_call = max(
        (i for i in range(plan.tail_start, len(view)) if tool_calls_of(view[i])), default=len(view)
    )
    demoted = prune_messages(view, plan.tail_start, newest_call, run.options, pairing=run.pairing)
    return demoted.messages[plan.tail_start :], len(demoted.pruned)


def _replaced_upto(view: Sequence[Message], result: Sequence[Message]) -> int:
    """How many leading input messages the result no longer holds verbatim (as the same objects)."""
    kept = 0
    while (
        kept < len(view)
        and kept < len(result)
        and result[len(result) - 1 - kept] is view[len(view) - 1 - kept]
    ):
        kept += 1
    return len(view) - kept
