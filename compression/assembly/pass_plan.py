"""What one compression pass reads, and the plan of its cut.

`PassInputs` is computed once per pass (the view's figures, tool pairing, pins, file reads,
working set, user messages); the functions here read it to choose the least aggressive cut
whose estimate fits, and to say when no cut can (see `compression.compressor`, which runs
the pass).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
)
from compression.counting.figures import PassFigures
from compression.engine import CompressionContext, CompressionResult, Outcome
from compression.messages.toolpairs import ToolPairing
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.state import EngineState
from compression.summary.handoff import handoff_text
from compression.thresholds import Limits
from compression.verbatim.carry import carry_need
from compression.verbatim.fileops import FileOp
from compression.verbatim.pins import PinPlan, find_pins, plan_pins
from compression.verbatim.preamble import fixed_end
from compression.verbatim.reads import FileRead, files_need
from compression.verbatim.usermessages import UserMessages
from compression.verbatim.workingset import WorkingSet


@dataclass(frozen=True, slots=True)
class PassInputs:
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


def pins_of(run: PassInputs) -> PinPlan:
    """The pinned messages of the view and what of them fits (see `compression.verbatim.pins`)."""
    options, figures = run.options, run.figures
    found = find_pins(
        run.view, figures.tokens, options.pin_paste_tokens, figures.counter.count_text
    )
    if not found:
        return PinPlan()
    return plan_pins(found, int(run.limits.threshold * options.pin_share), figures.message)


def lifted_pins(run: PassInputs, plan: CutPlan) -> list[int]:
    """The pinned messages of the plan's summarized middle: kept, right before the summary."""
    return sorted(i for i in run.pins.indices if plan.head_end <= i < plan.tail_start)


def plan_pass(run: PassInputs, state: EngineState) -> CutPlan:
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
        if estimate_tokens(run, candidate) <= budgets.target:
            break
    return plan or plan_cut(
        run.view,
        run.figures,
        run.pairing,
        head,
        budgets_for(run.options, limits, fixed, MAX_LEVEL, users.total, files, users.origin),
        MAX_LEVEL,
    )


def estimate_tokens(run: PassInputs, plan: CutPlan, *, with_summary: bool = True) -> int:
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


def hopeless_reason(run: PassInputs, plan: CutPlan) -> str | None:
    """Why no summary could make this plan acceptable (so none is requested), if so."""
    if plan.level < MAX_LEVEL:
        return None
    floor = estimate_tokens(run, plan, with_summary=False)
    if floor >= run.figures.total:
        return f"the messages that must stay verbatim ({floor:,} tokens) are not smaller"
    limit = pass_limit(run)
    projected = int(floor * run.calibration)  # in the provider's tokens, like the limit
    if not run.ctx.force and projected >= limit:
        return f"the messages that must stay verbatim ({projected:,} tokens) are over {limit:,}"
    return None


def fixed_part_too_large(run: PassInputs) -> str | None:
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


def anchor_room(run: PassInputs, budgets: Budgets, after: int, limit: int) -> int:
    """Tokens the anchors may take beyond their planned budget: up to a floor (a share of the
    threshold) where the assembled view leaves that much under the pass's limit. Where the
    system prompt and tools take most of the threshold, the plan leaves them nothing, while a
    hygiene pass has the room up to its own line: the exact ids of the compacted turns then
    stay in view instead of only in the archive. The view still shrinks by a tenth at least."""
    floor = min(run.options.max_anchor_tokens, int(run.limits.threshold * ANCHOR_FLOOR_SHARE))
    ceiling = min(int(limit / run.calibration), run.figures.total) * TARGET_SHARE
    headroom = int(ceiling) - after
    return max(0, min(floor - budgets.anchors, headroom))


def pass_limit(run: PassInputs) -> int:
    """The size a result must stay under (hygiene passes only need to clear the hygiene line)."""
    return run.limits.hygiene_tokens if run.ctx.trigger == "hygiene" else run.limits.threshold
