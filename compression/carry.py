"""What the handoff carries verbatim: the user's own messages and the anchors (pure).

User messages: candidates are the real user messages of the summarized region (tool
observations sent as `user` by text-action agents are not: they are summarized like tool
results) plus those an earlier summary in the region already carried. Chosen within a count
and token bound, in this order, then emitted oldest first:

    1. the original request (what was sent before the first reply after the client's canned
       opening, see `compression.preamble`), clipped head+tail when none of it fits whole
    2. the earliest messages that state a constraint ("never…", "don't…", "only…")
    3. the newest of the rest

Anchors: exact ids, paths and error names of everything summarized that is not otherwise
kept verbatim (see `compression.anchors`), within their own budget plus what the user
messages left unused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from compression.anchors import AnchorIndex, Collector, select_anchors
from compression.content import clip_middle, content_text
from compression.handoff import Handoff, handoff_text, parse_handoff, user_text
from compression.ledger import Ledger
from compression.observations import has_output_marker, observation_indices
from compression.options import CompressorOptions
from compression.planning import CutPlan
from compression.preamble import preamble_end
from compression.prompts import ANCHORS_HEADER, USER_CLOSE, USER_MESSAGES_HEADER, USER_OPEN
from compression.toolpairs import call_parts, tool_calls_of
from compression.types import Message

ORIGIN_SHARE = 0.5  # of the budget, most the original request may take
CONSTRAINT_SHARE = 0.5  # of what the original request left, for the earliest constraints
CONSTRAINT_SCAN_CHARS = 4000
MIN_CLIP_TOKENS = 48  # a clipped original request shorter than this says too little
_CONSTRAINT = re.compile(
    r"\b(?:must(?:n[’']?t)?|never|always|do not|don[’']?t|does not|doesn[’']?t|cannot|"
    r"can[’']?t|won[’']?t|should(?:n[’']?t)?|only|avoid|prefer(?:ably|red)?|rather|instead|"
    r"without|make sure|ensure|require[sd]?|at (?:least|most)|no (?:more|later|earlier) than|"
    r"deadline|budget)\b",
    re.IGNORECASE,
)
USER_TIER, AGENT_TIER, TOOLS_TIER = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Carried:
    text: str
    tokens: int | None = None  # known size (an upper bound), when counted already
    constraint: bool = False  # states a rule or preference
    opening: bool = False  # sent before any reply: part of the original request


def clear_caches() -> None:
    """Forget memoized judgements (benchmarks measuring a cold pass)."""
    _states_constraint.cache_clear()


def states_constraint(text: str) -> bool:
    # Rules are stated up front; the rest of a long message is pasted material.
    return _states_constraint(text[:CONSTRAINT_SCAN_CHARS])


@lru_cache(maxsize=4096)  # keyed by a bounded head; the same messages come back every pass
def _states_constraint(head: str) -> bool:
    return _CONSTRAINT.search(head) is not None


def carry_candidates(
    messages: Sequence[Message],
    start: int,
    end: int,
    skip: int | None,
    ledger: Ledger,
    observations: frozenset[int] | None = None,
    pinned: frozenset[int] = frozenset(),
) -> list[Carried]:
    """Oldest first. `skip` is the newest user message when it is restated separately;
    `pinned` are messages the view keeps verbatim outside the summary.

    The opening candidates are the user messages sent before the first reply, or else the
    first message an earlier summary carried (where that summary kept the original request).
    A client's canned opening (examples, acknowledged context) is neither: it is not carried.
    """
    if observations is None:
        observations = observation_indices(messages, start, end)
    canned = preamble_end(messages)
    replied = any(_replies(message) for message in messages[canned:start])
    found: list[Carried] = []
    for index in range(max(start, canned), end):
        message = messages[index]
        summary = handoff_text(message)
        if summary is not None:
            parsed = parse_handoff(summary)
            if parsed is not None:
                for text in parsed.handoff.user_messages:
                    opening = not found and not replied
                    found.append(Carried(text, None, states_constraint(text), opening))
            replied = True  # whatever the summary was merged into came after earlier turns
        own = message.get("role") == "user" and index not in observations
        if index == skip or not own or index in pinned:
            replied = replied or _replies(message)
            continue
        text = user_text(message)
        if summary is not None and has_output_marker(text):
            continue  # a tool observation the summary was merged into
        if text.strip():
            known = ledger.tokens[index] if summary is None else None
            found.append(Carried(text, known, states_constraint(text), not replied))
    return found


def _replies(message: Message) -> bool:
    return message.get("role") == "assistant" or handoff_text(message) is not None


def select_carried(
    candidates: Sequence[Carried],
    max_count: int,
    max_tokens: int,
    count: Callable[[str], int],
    overhead: int = 0,
    present: Callable[[str], bool] | None = None,
) -> tuple[str, ...]:
    """The original request, the earliest constraints, the newest; emitted oldest first.

    `overhead` is what each carried message costs beyond its text (its delimiters).
    `present(text)` says the view already quotes a message verbatim (the summary did):
    the newest-first fill skips those, the original request and constraints never do.
    """
    if max_count <= 0 or max_tokens <= 0 or not candidates:
        return ()
    pick = _Picker(candidates, max_count, count, overhead)
    opening = [i for i, candidate in enumerate(candidates) if candidate.opening]
    if opening and max_count > 1:
        # The original request may always take enough for a short clip: it is the last to go.
        allowance = max(int(max_tokens * ORIGIN_SHARE), min(max_tokens, MIN_CLIP_TOKENS + overhead))
        used = pick.take(reversed(opening), allowance)
        if not used:
            used = pick.clipped(opening[-1], allowance)
        max_tokens -= used
    constraints = [i for i, candidate in enumerate(candidates) if candidate.constraint]
    max_tokens -= pick.take(constraints, int(max_tokens * CONSTRAINT_SHARE))
    pick.take(range(len(candidates) - 1, -1, -1), max_tokens, present)
    return pick.chosen()


class _Picker:
    """The carried messages chosen so far, by candidate position."""

    def __init__(
        self,
        candidates: Sequence[Carried],
        max_count: int,
        count: Callable[[str], int],
        overhead: int,
    ) -> None:
        self.candidates = candidates
        self.max_count = max_count
        self.count = count
        self.overhead = overhead
        self.picked: dict[int, str] = {}
        self.seen: set[str] = set()

    def take(
        self,
        order: Iterable[int],
        allowance: int,
        present: Callable[[str], bool] | None = None,
    ) -> int:
        """Whole candidates in `order` while they fit `allowance`; returns the tokens used."""
        used = 0
        for position in order:
            if len(self.picked) >= self.max_count:
                break
            candidate = self.candidates[position]
            if candidate.text in self.seen or (present is not None and present(candidate.text)):
                continue
            size = _size(candidate, self.count) + self.overhead
            if used + size <= allowance:
                self.picked[position] = candidate.text
                self.seen.add(candidate.text)
                used += size
        return used

    def clipped(self, position: int, allowance: int) -> int:
        """The candidate's head and tail within `allowance`, when that says enough."""
        candidate = self.candidates[position]
        text = _clip(candidate, allowance - self.overhead, self.count)
        if text is None:
            return 0
        self.picked[position] = text
        self.seen.add(candidate.text)
        return self.count(text) + self.overhead

    def chosen(self) -> tuple[str, ...]:
        return tuple(self.picked[position] for position in sorted(self.picked))


def _clip(candidate: Carried, allowance: int, count: Callable[[str], int]) -> str | None:
    """The head and tail of a message within `allowance` tokens, or None if too little fits."""
    if allowance < MIN_CLIP_TOKENS:
        return None
    size = _size(candidate, count)
    limit = int(len(candidate.text) * allowance / max(size, 1))
    for _ in range(4):  # the clip marker and uneven token density can overshoot a little
        clipped = clip_middle(candidate.text, limit)
        if count(clipped) <= allowance:
            return clipped
        limit = int(limit * 0.85)
    return None


def _size(candidate: Carried, count: Callable[[str], int]) -> int:
    return candidate.tokens if candidate.tokens is not None else count(candidate.text)


def anchor_candidates(
    messages: Sequence[Message],
    start: int,
    end: int,
    per_tier: int,
    observations: frozenset[int] | None = None,
) -> tuple[list[str], ...]:
    """Anchors of `messages[start:end]` by tier, newest first (`per_tier` bounds the scan)."""
    if observations is None:
        observations = observation_indices(messages, start, end)
    collector = Collector(per_tier)
    for index in range(end - 1, start - 1, -1):
        if collector.done():
            break
        message = messages[index]
        role = message.get("role")
        summary = handoff_text(message)
        if summary is not None:
            parsed = parse_handoff(summary)
            if parsed is not None:
                _add_handoff(collector, parsed.handoff)
            collector.scan(USER_TIER, user_text(message))
        elif role == "user":
            tier = TOOLS_TIER if index in observations else USER_TIER
            collector.scan(tier, content_text(message))
        elif role == "tool":
            collector.scan(TOOLS_TIER, content_text(message))
        else:
            collector.scan(AGENT_TIER, _text(message))
    return collector.candidates()


def _add_handoff(collector: Collector, handoff: Handoff) -> None:
    """An earlier handoff: its own anchors, then what its carried texts and body name."""
    for tier, values in enumerate(handoff.anchors.tiers()):
        collector.add(tier, values)
    for text in reversed(handoff.user_messages):
        collector.scan(USER_TIER, text)
    collector.scan(AGENT_TIER, handoff.last_reply or "")
    collector.scan(AGENT_TIER, handoff.body)


def carry_section(
    messages: Sequence[Message],
    plan: CutPlan,
    ledger: Ledger,
    options: CompressorOptions,
    count: Callable[[str], int],
    kept: Sequence[Message | str],
    pinned: frozenset[int] = frozenset(),
) -> tuple[tuple[str, ...], AnchorIndex]:
    """The user messages and anchors a handoff carries for the plan's summarized region.

    `kept` is the rest of the compressed view (head, tail, summary body, …): anchors it
    already holds verbatim are not repeated; `pinned` messages of the region are not carried.
    """
    start, end = plan.head_end, plan.tail_start
    budgets = plan.budgets
    kept_text = "\n".join(_text(item) for item in kept)
    observations = observation_indices(messages, start, end)
    candidates = carry_candidates(messages, start, end, plan.restate, ledger, observations, pinned)
    overhead = count(f"{USER_OPEN}\n\n{USER_CLOSE}\n")
    header = count(USER_MESSAGES_HEADER) if candidates else 0
    users = select_carried(
        candidates,
        options.max_user_messages_carried,
        budgets.carry - header,
        count,
        overhead,
        kept_text.__contains__,
    )
    used = header + sum(count(text) + overhead for text in users) if users else 0
    spare = max(0, budgets.carry - used)
    room = min(budgets.anchors + spare, options.max_anchor_tokens) - count(ANCHORS_HEADER) - 4
    if room <= 0:
        return users, AnchorIndex()
    present = "\n".join([*users, kept_text])
    # An anchor costs at least ~3 tokens with its separator: room // 3 per tier always fills.
    tiers = anchor_candidates(messages, start, end, room // 3, observations)
    return users, select_anchors(tiers, room, count, present.__contains__)


def _text(item: Message | str) -> str:
    """What a model reads of a message: its text and its tool-call arguments."""
    if isinstance(item, str):
        return item
    parts = [content_text(item)]
    parts += [call_parts(call)[1] or "" for call in tool_calls_of(item)]
    return "\n".join(parts)
