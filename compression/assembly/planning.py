"""Where to cut: the protected head, the summarized middle and the verbatim tail (pure).

    [head: system, canned opening (+ first turns, first compression only)] [middle] [tail]

The tail is walked back from the newest message by token budget with a message floor, and
moved back so an assistant message with `tool_calls` is never split from its results (nor a
text agent's action from the output it got back as a `user` message). The
newest user message and the newest assistant reply must stay verbatim: the tail stretches to
them when it can, otherwise the plan says to restate / carry them after the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from compression.counting.figures import PassFigures
from compression.messages.content import has_text
from compression.messages.toolpairs import ToolPairing, group_end, group_start, tool_calls_of
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import handoff_text, user_text
from compression.thresholds import TAIL_MAX_CONTEXT_SHARE, Limits, summary_budget, tail_budget
from compression.verbatim.observations import is_observation
from compression.verbatim.preamble import system_end

MAX_LEVEL = 2
TAIL_FLOOR_CAP = 8
TARGET_SHARE = 0.90  # aim under the threshold with room for estimate error
MARKER_TOKENS = 200  # prefix, end marker and headers of the handoff message
MIN_SUMMARY_TOKENS = 128
MIN_MIDDLE_TOKENS = 512
USER_ROOM_SHARE = 0.60  # of the room the file reads leave, most the user's messages may take
FILE_ROOM_SHARE = 0.40  # of the room, most carried file reads may take
ORIGIN_ROOM_SHARE = 0.40  # of the room, what the original request may claim before the files
ANCHOR_SHARE = 0.08  # of the room: the anchor index (plus what the carried messages leave)
ANCHOR_ROOM_SHARE = 0.15  # of the room, what the anchors keep whatever else the handoff carries
ANCHOR_FLOOR_SHARE = 0.25  # of the threshold, what the anchors may take where the limit allows
OPENING_SHARE = 0.25  # of the threshold, most a client's canned opening may keep verbatim


@dataclass(frozen=True, slots=True)
class Budgets:
    target: int  # tokens the compressed view should stay under
    tail: int  # tokens of recent messages kept verbatim
    reach: int  # how far the tail may stretch to keep the newest user message verbatim
    carry: int  # tokens of user messages carried verbatim inside the handoff
    summary_cap: int  # most tokens the summary body may take in the view
    floor: int  # fewest messages in the tail
    anchors: int = 0  # tokens of the anchor index (exact ids and paths) inside the summary
    files: int = 0  # tokens of the newest file reads carried verbatim inside the handoff


@dataclass(frozen=True, slots=True)
class CutPlan:
    head_end: int
    tail_start: int
    restate: int | None  # newest user message, restated after the summary
    reply: int | None  # newest assistant reply, carried verbatim inside the summary
    level: int
    budgets: Budgets

    @property
    def empty(self) -> bool:
        return self.tail_start <= self.head_end


def head_end(
    messages: Sequence[Message], protect_first_n: int, decayed: bool, fixed: int = 0
) -> int:
    """System/developer messages and the client's canned opening (up to `fixed`), plus the
    first turns while no compression happened yet.

    After the first compression the early turns live in the summary; keeping them verbatim
    too would copy them into every later view forever.
    """
    end = system_end(messages)
    end = max(end, min(fixed, len(messages)))
    if not decayed:
        end = min(end + protect_first_n, len(messages))
    return group_end(messages, end)


def budgets_for(
    options: CompressorOptions,
    limits: Limits,
    fixed_tokens: int,
    level: int,
    users: int = 0,
    files: int = 0,
    origin: int = 0,
) -> Budgets:
    """What each part of the compressed view may take. `users` is what carrying every user
    message of the region would cost, `origin` the original request's part of it, `files`
    every newest file read: they come first, the tail and summary share the rest."""
    target = int(limits.threshold * TARGET_SHARE)
    room = max(0, target - fixed_tokens - min(MARKER_TOKENS, target // 10))
    user_cap = int(limits.threshold * options.user_share)
    # The original request goes first, up to a share of the room: it says what the task is,
    # and a clip of it is what every later handoff reads back, while a file the agent needs
    # again can be read again.
    first = min(origin, users, user_cap, int(room * ORIGIN_ROOM_SHARE))
    # The files go next: what the agent is editing now matters more to its next step than
    # the oldest user messages, and the share files do not use goes to the user's words.
    reads = min(
        files, int(limits.threshold * options.file_share), int((room - first) * FILE_ROOM_SHARE)
    )
    # The exact ids and paths of the compacted turns keep a share of the room that the user's
    # words cannot take: a pass whose words fill the handoff would carry none, and what one
    # handoff drops no later one can bring back.
    kept = min(options.max_anchor_tokens, int(room * ANCHOR_ROOM_SHARE))
    later = max(0, int((room - first - reads - kept) * USER_ROOM_SHARE))
    carry = min(users, user_cap, first + later)
    rest = room - carry - reads - kept
    scale = (1.0, 0.5, 0.25)[min(level, MAX_LEVEL)]
    lean = tail_budget(options, limits.context_length, limits.threshold)
    tail = max(1, int(min(lean, rest * 0.40) * scale))
    reach_cap = min(int(limits.context_length * TAIL_MAX_CONTEXT_SHARE), int(rest * 0.55))
    reach = max(tail, int(min(tail * 1.5, reach_cap)))
    floor = min(options.protect_last_n, TAIL_FLOOR_CAP)
    floor = (floor, min(floor, 4), min(floor, 2))[min(level, MAX_LEVEL)]
    deterministic = 1.0 if level < 2 else 0.5
    # The kept share came out of the user's words: it stays whole at every level.
    anchors = min(options.max_anchor_tokens, kept + int(rest * ANCHOR_SHARE * deterministic))
    return Budgets(
        target=target,
        tail=tail,
        reach=reach,
        carry=carry,
        summary_cap=max(1, int(rest * 0.30)),
        floor=floor,
        anchors=anchors,
        files=reads,
    )


def yielded(budgets: Budgets, overshoot: int, floor: int = 0, anchors: int = 0) -> Budgets:
    """The budgets with the user's words carried verbatim given up by `overshoot` tokens,
    down to `floor` (what holds the original request's first lines): when the most
    aggressive cut still does not fit, nothing else is left to shrink, and a handoff that does
    not fit fails the request it was made for. What no longer fits is clipped with its handle
    (`compression.verbatim.userwords`). The newest file reads keep their own budget: the next
    edit needs them whole. Where the user's words give up all of `overshoot` (the view then
    lands under the limit with room to spare), the anchors keep `anchors` of their own: they
    take what the user's words leave, so the best-ranked (a setting, the user's rule) would
    go with them. Where the words at their floor still leave the view over, the anchors give
    up the rest: a view the provider refuses again carries nothing at all."""
    if overshoot <= 0:
        return budgets
    carry = max(min(budgets.carry, floor), budgets.carry - overshoot)
    left = overshoot - (budgets.carry - carry)
    if left > 0:  # the words are at their floor and the view is still over: the anchors give
        return replace(budgets, carry=carry, anchors=max(0, budgets.anchors - left))
    return replace(budgets, carry=carry, anchors=max(budgets.anchors, anchors))


def plan_cut(
    messages: Sequence[Message],
    figures: PassFigures,
    pairing: ToolPairing,
    head: int,
    budgets: Budgets,
    level: int,
) -> CutPlan:
    total = len(messages)
    floor = min(budgets.floor, max(1, total - head - 1))
    start = _walk_back(figures.tokens, head, budgets.tail, floor)
    if start < total:
        start = group_start(messages, pairing, start)
    if head < start < total and is_observation(messages, start):
        start -= 1  # a text agent's action and its output stay together, like a call's result
    restate: int | None = None
    reply: int | None = None
    user = newest_user(messages)
    if user is not None and head <= user < start:
        if figures.span(user, total) <= budgets.reach:
            start = user
        else:
            restate = user
    answer = newest_reply(messages)
    if answer is not None and head <= answer < start:
        if restate is None and figures.span(answer, total) <= budgets.reach:
            start = answer
        else:
            reply = answer
    if start <= head:
        return CutPlan(head, head, None, None, level, budgets)
    return CutPlan(head, start, restate, reply, level, budgets)


def worth_summarizing(plan: CutPlan, figures: PassFigures, threshold: int, pinned: int = 0) -> bool:
    """Whether the middle (less the `pinned` tokens of it kept anyway) is big enough that a
    summary can pay for its own overhead."""
    if plan.empty:
        return False
    middle = figures.span(plan.head_end, plan.tail_start) - pinned
    return middle >= min(MIN_MIDDLE_TOKENS, threshold // 8)


def _walk_back(tokens: list[int], head: int, budget: int, floor: int) -> int:
    used = 0
    index = len(tokens)
    while index > head:
        cost = tokens[index - 1]
        if len(tokens) - index >= floor and used + cost > budget:
            break
        used += cost
        index -= 1
    return index


def newest_user(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and user_text(message).strip():
            return index
    return None


def newest_reply(messages: Sequence[Message]) -> int | None:
    """The newest assistant message that answers in text rather than calling tools."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "assistant" or tool_calls_of(message):
            continue
        if has_text(message) and handoff_text(message) is None:
            return index
    return None


def summary_tokens(
    options: CompressorOptions, plan: CutPlan, figures: PassFigures, context_length: int
) -> int:
    middle = figures.span(plan.head_end, plan.tail_start)
    budget = min(summary_budget(options, middle, context_length), plan.budgets.summary_cap)
    # A summary must be shorter than the turns it replaces: the 2,000-token floor yields.
    return min(budget, max(MIN_SUMMARY_TOKENS, middle // 2))
