"""The summary of a pass's middle: the call sized for the summary model, its gate, the fallback.

    summary = await summarize_middle(view, ctx, options, figures, pairing, plan, state)
    summary.body is None  -> the pass aborts (summary.failure says why)
    summary.failure set   -> body is the deterministic fallback (the model's summary unusable)
    summary.truncated     -> body is the model's summary, cut at its output limit

The call is sized in the summary model's own tokens: our counter's figures are scaled by that
model's ratio (measured on its earlier summary replies, else given by the caller, else a
margin), so a small-window model is never sent a prompt its tokenizer counts past its window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from compression.assembly.planning import CutPlan, summary_tokens
from compression.counting.calibration import Calibration
from compression.counting.figures import PassFigures
from compression.engine import CompressionContext, SummaryCall, SummaryReply
from compression.messages.content import content_text
from compression.messages.toolpairs import ToolPairing, call_parts, tool_calls_of
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.pruning.passes import one_liner, prune_messages
from compression.state import EngineState
from compression.summary.call import (
    GatedSummary,
    SummaryPrompt,
    build_call,
    cut_to_budget,
    gate_reply,
    prompt_overhead,
    request_summary,
    size_call,
    summary_ratio,
)
from compression.summary.failures import SummaryFailure
from compression.summary.fallback import fallback_summary
from compression.summary.handoff import handoff_text, parse_handoff
from compression.summary.records import bounded_previous, fit_records, render_records

EXACT_CHECK_WINDOW = 32_768  # small summary windows get an exact token count of the prompt
EXACT_CHECK_SHARE = 0.97  # of the window a checked prompt plus its output may fill
NO_SUMMARIZER = "no summarizer configured"


@dataclass(frozen=True, slots=True)
class MiddleSummary:
    body: str | None  # None: the pass aborts
    failure: SummaryFailure | None  # why the model's summary was not used
    pruned: int
    truncated: bool = False
    calibration: Calibration | None = None  # the summary model's, updated by this call


async def summarize_middle(
    view: Sequence[Message],
    ctx: CompressionContext,
    options: CompressorOptions,
    figures: PassFigures,
    pairing: ToolPairing,
    plan: CutPlan,
    state: EngineState,
) -> MiddleSummary:
    counter = ctx.counter
    start, end = plan.head_end, plan.tail_start
    pruned = prune_messages(view, start, end, options, one_liners=False, pairing=pairing)
    previous = previous_summary(view, start, end)
    window = (
        ctx.summary_context_length or options.summary_model_context_length or ctx.context_length
    )
    learned = Calibration.from_dict(state.summary_calibration)
    ratio = summary_ratio(ctx.summary_token_ratio, learned)
    budget = summary_tokens(options, plan, figures, ctx.context_length)
    overhead = prompt_overhead(counter)
    size = size_call(budget, window, options.summary_input_max_tokens, overhead, ratio)
    per_char = tokens_per_char(view, figures, start, end)
    previous_text = bounded_previous(previous, size.input_tokens * 3 // 10, per_char)
    room = size.input_tokens - (int(len(previous_text) * per_char) if previous_text else 0)
    records = render_records(view, pruned.messages, start, end, pairing, options)

    def one_line(index: int) -> str:
        return one_liner(view, index, pairing)

    turns = fit_records(records, room, per_char, one_line)
    prompt = SummaryPrompt(turns, previous_text, size.budget, ctx.focus)
    call = build_call(prompt, size.max_tokens, options.summary_model)
    if window <= EXACT_CHECK_WINDOW:
        # Our per-character estimate of the records can be off; count the real prompt once.
        real = counter.count_messages(call.messages) * ratio + size.max_tokens
        over = math.ceil((real - window * EXACT_CHECK_SHARE) / ratio)
        if over > 0:
            turns = fit_records(records, max(64, room - over), per_char, one_line)
            call = build_call(replace(prompt, turns=turns), size.max_tokens, options.summary_model)
    if ctx.summarize is None:
        gated: GatedSummary | SummaryFailure = SummaryFailure("other", NO_SUMMARIZER)
        calibration = None
    else:
        reply = await request_summary(ctx.summarize, call, options.summary_timeout)
        if isinstance(reply, SummaryFailure):
            gated, calibration = reply, None
        else:
            gated = gate_reply(reply, size.budget, counter)
            calibration = _observe(learned, reply, call, ctx)
    if isinstance(gated, GatedSummary):
        return MiddleSummary(gated.body, None, len(pruned.pruned), gated.truncated, calibration)
    if gated.aborts_pass(ctx.force) or options.abort_on_summary_failure:
        return MiddleSummary(None, gated, len(pruned.pruned), calibration=calibration)
    reason = "no summary model configured" if ctx.summarize is None else gated.kind
    text = fallback_summary(view, start, end, pairing, previous, reason)
    body = cut_to_budget(text, size.budget, counter)
    return MiddleSummary(body, gated, len(pruned.pruned), calibration=calibration)


def _observe(
    learned: Calibration, reply: SummaryReply, call: SummaryCall, ctx: CompressionContext
) -> Calibration | None:
    """The summary model's calibration with this call's real prompt size folded in."""
    if reply.prompt_tokens is None:
        return None
    updated = learned.observe(reply.prompt_tokens, ctx.counter.count_messages(call.messages))
    return updated if updated != learned else None


def previous_summary(view: Sequence[Message], start: int, end: int) -> str | None:
    bodies = []
    for message in view[start:end]:
        text = handoff_text(message)
        parsed = parse_handoff(text) if text is not None else None
        if parsed is not None and parsed.handoff.body:
            bodies.append(parsed.handoff.body)
    return "\n\n".join(bodies) or None


def tokens_per_char(view: Sequence[Message], figures: PassFigures, start: int, end: int) -> float:
    chars = 0
    for message in view[start:end]:
        chars += len(content_text(message)) + 16
        for call in tool_calls_of(message):
            chars += len(call_parts(call)[1] or "") + 16
    return min(max(figures.span(start, end) / max(chars, 1), 0.2), 1.0)
