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
from dataclasses import replace
from typing import Any

from compression.assembly.invariants import CompressionInvariantError, check_invariants
from compression.assembly.pass_plan import (
    PassInputs,
    anchor_room,
    fixed_part_too_large,
    hopeless_reason,
    lifted_pins,
    pass_limit,
    pins_of,
    plan_pass,
)
from compression.assembly.planning import (
    MAX_LEVEL,
    TARGET_SHARE,
    CutPlan,
    worth_summarizing,
    yielded,
)
from compression.assembly.splice import assemble
from compression.counting.figures import PassFigures
from compression.engine import ClippedMessage, CompressionContext, CompressionResult, Outcome
from compression.messages.content import content_text
from compression.messages.toolpairs import (
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
    render_working,
    user_text,
    view_summaries,
)
from compression.summary.middle import MiddleSummary, summarize_middle
from compression.thresholds import Limits, limits_for
from compression.verbatim.carry import (
    YIELD_ANCHOR_DIVISOR,
    YIELD_ANCHOR_TOKENS,
    carry_section,
    yield_floor,
)
from compression.verbatim.fileops import file_ops
from compression.verbatim.observations import observation_indices
from compression.verbatim.reads import (
    newest_reads,
    read_candidates,
    select_files,
)
from compression.verbatim.reads import superseded as superseded_reads
from compression.verbatim.usermessages import user_messages
from compression.verbatim.userwords import Selection
from compression.verbatim.workingset import working_set

log = logging.getLogger(__name__)

TRUNCATED_NOTE = (
    "the summary stopped at the summary model's output limit; kept up to its last complete line"
)
CLIPPED_NOTE = "nothing but the protected opening was left: its tool outputs were clipped"


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
        run = PassInputs(
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
        too_large = fixed_part_too_large(run)
        if too_large is not None:
            return run.unchanged("rejected", with_strike(state, ctx.now), too_large)
        ops = tuple(file_ops(view))
        reads = tuple(newest_reads(view, ops))
        observations = observation_indices(view, 0, len(view))
        run = replace(
            run,
            pins=pins_of(run),
            ops=ops,
            reads=reads,
            working=working_set(view, ops, observations),
            words=user_messages(view, figures, observations, ctx.originals),
        )
        if run.pins.refused is not None:
            return run.unchanged("rejected", with_strike(state, ctx.now), run.pins.refused)
        plan = plan_pass(run, state)
        pinned = sum(figures.tokens[i] for i in lifted_pins(run, plan))
        if not worth_summarizing(plan, figures, run.limits.threshold, pinned):
            clipped = _clipped(run, state) if ctx.force else None
            if clipped is not None:
                return clipped
            return run.unchanged("noop", with_noop(state, ctx.now), "nothing to compress")
        hopeless = hopeless_reason(run, plan)
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


def _skip_reason(run: PassInputs, state: EngineState) -> str | None:
    if not run.view:
        return "empty view"
    if run.ctx.force or run.ctx.trigger == "hygiene":
        return None
    if not run.ctx.due and run.figure < run.limits.threshold:
        return f"under the threshold ({run.figure:,} < {run.limits.threshold:,} tokens)"
    return blocked_reason(state, run.ctx.now)


def _clipped(run: PassInputs, state: EngineState) -> CompressionResult | None:
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


def _failed(run: PassInputs, state: EngineState, failure: SummaryFailure) -> EngineState:
    streak = state.failure_streak.get(failure.kind, 0) + 1
    seconds = cooldown_seconds(failure.kind, streak, run.options.cooldowns)
    return with_failure(state, failure.kind, seconds, run.ctx.now)


def _summary_state(run: PassInputs, state: EngineState, summary: MiddleSummary) -> EngineState:
    if summary.failure is None:
        return with_summary_success(state)
    if run.ctx.summarize is None:
        return state  # nothing failed: the deployment runs without a summary model
    return _failed(run, state, summary.failure)


def _finish(
    run: PassInputs, plan: CutPlan, summary: MiddleSummary, body: str, state: EngineState
) -> CompressionResult:
    view, figures, options = run.view, run.figures, run.options
    pinned = run.pins.apply(view)  # pinned messages as kept: verbatim, or their clips
    lifted = lifted_pins(run, plan)
    # Before the summary, not after it: the summary changes at every compression, so what
    # follows it is never a cached prefix, while the head and unchanged pins stay one.
    head = [*pinned[: plan.head_end], *(pinned[i] for i in lifted)]
    tail, demoted = _tail(run, plan, pinned)
    restate = view[plan.restate] if plan.restate is not None else None
    reply = content_text(view[plan.reply]) if plan.reply is not None else None
    limit = pass_limit(run)
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
        extra = anchor_room(run, carrying.budgets, after, limit) if attempt == 0 else 0
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


def _tail(run: PassInputs, plan: CutPlan, view: list[Message]) -> tuple[list[Message], int]:
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
