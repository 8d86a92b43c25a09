"""Which of the user's own messages a handoff carries, whole or clipped, within a budget (pure).

Every user message of the summarized region is carried verbatim when the budget allows (the
default is generous). When it binds, they are chosen in this order, newest first within each
group, then emitted oldest first:

    1. the original request (what was sent before the first reply), whole if it takes at most
       half the budget or what the later instruction-bearing messages leave of it, else
       clipped to that half or, where the budget is small, to its first lines
       (`ORIGIN_CLIP_TOKENS`, as far as the budget holds them);
    2. messages that state or change an instruction (`compression.verbatim.instructions`);
    3. the rest;
    4. messages a later one explicitly takes back ("ignore my previous message", "forget the
       earlier instruction"): the later one replaces them, so they go last. The original
       request is never taken back this way.

What does not fit whole is clipped to its head and tail (the proxy writes its handle into the
clip), in the same order, while a clip that says something still fits. A message neither whole
nor clipped is named only by the summary's archive line; the result reports it with the clips,
so the response can say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from compression.messages.content import clip_middle
from compression.verbatim.instructions import states_instruction, supersedes

ORIGIN_SHARE = 0.5  # of the budget, most the original request may take whole
MIN_CLIP_TOKENS = 48  # a clip shorter than this says too little
# The least of the original request a handoff holds while the budget allows: its first lines,
# which say what the task is (a shorter clip keeps little more than a greeting).
ORIGIN_CLIP_TOKENS = 2 * MIN_CLIP_TOKENS


@dataclass(frozen=True, slots=True)
class Carried:
    text: str
    tokens: int | None = None  # known size (an upper bound), when counted already
    instruction: bool = False  # states or changes an instruction
    opening: bool = False  # sent before any reply: part of the original request
    index: int | None = None  # the view position it comes from (an earlier summary's, if quoted)
    superseded: bool = False  # a later user message explicitly takes it back


@dataclass(frozen=True, slots=True)
class Shortened:
    """A candidate the handoff holds clipped (`kept` > 0) or not at all (`kept` == 0)."""

    index: int | None
    kept: int
    original: int
    instruction: bool


@dataclass(frozen=True, slots=True)
class Selection:
    texts: tuple[str, ...] = ()  # oldest first
    shortened: tuple[Shortened, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.shortened


def priority(candidates: Sequence[Carried]) -> list[int]:
    """Candidate positions in the order they claim the budget."""
    newest_first = range(len(candidates) - 1, -1, -1)

    def group(i: int) -> int:
        c = candidates[i]
        return 0 if c.opening else 3 if c.superseded else 1 if c.instruction else 2

    return sorted(newest_first, key=group)  # stable: newest first within a group


def mark_superseded(messages: Sequence[Carried | str]) -> list[Carried]:
    """The candidates among `messages` (the user's messages in order; a plain string is one
    that is not a candidate, such as one the view keeps anyway), each marked `superseded`
    when a later message explicitly takes it back: "…my previous message" the message just
    before, "…the earlier instruction" the newest instruction-bearing one before it."""
    out: list[Carried | str] = list(messages)
    rule_at: int | None = None  # the newest message so far that states an instruction
    for later, message in enumerate(messages):
        kind = supersedes(_text(message))
        if kind is not None:
            at = later - 1 if kind == "message" else rule_at
            if at is not None and at >= 0:
                target = out[at]
                # A plain string is in view anyway; the original request is left as it is.
                if isinstance(target, Carried) and not target.opening:
                    out[at] = replace(target, superseded=True)
        if _rule(message):
            rule_at = later
    return [m for m in out if not isinstance(m, str)]


def _text(message: Carried | str) -> str:
    return message if isinstance(message, str) else message.text


def _rule(message: Carried | str) -> bool:
    if isinstance(message, Carried):
        return message.instruction
    return states_instruction(message)


def select_carried(
    candidates: Sequence[Carried],
    max_tokens: int,
    count: Callable[[str], int],
    overhead: int = 0,
    present: Callable[[str], bool] | None = None,
) -> Selection:
    """The texts to carry, oldest first, and what of the candidates they hold shortened.

    `overhead` is what each carried message costs beyond its text (its delimiters);
    `present(text)` says the rest of the view already holds a message verbatim (the summary
    quotes it, it stays in the tail): it needs no copy.
    """
    pick = _Picker(candidates, count, overhead, present)
    order = [i for i in priority(candidates) if pick.wanted(i)]
    opening = [i for i in order if candidates[i].opening]
    left = max(0, max_tokens)
    # Later messages that state an instruction keep their room; the rest (a remark, an
    # output the harness sent as the user's) do not clip the task statement.
    rules = sum(pick.size(i) for i in order if _rule_after(candidates[i])) if opening else 0
    for position in opening:
        # It may always take enough for a short clip: the original request is the last to go.
        share = min(left, max(int(max_tokens * ORIGIN_SHARE), ORIGIN_CLIP_TOKENS + overhead))
        whole = pick.whole(position, max(share, left - rules))
        left -= whole or pick.clipped(position, share)
    floor = MIN_CLIP_TOKENS + overhead
    reserved = 0  # a short clip's worth for each message before this one that did not fit
    for position in order:
        if candidates[position].opening:
            continue
        used = pick.whole(position, left - reserved)
        if used:
            left -= used
        elif left - reserved >= floor:
            reserved += floor
        else:
            break  # a message before the rest would go without even a clip: the rest wait too
    waiting = [i for i in order if i not in pick.picked and i not in pick.shortened]
    for done, position in enumerate(waiting):
        left -= pick.clipped(position, min(left, max(left // (len(waiting) - done), floor)))
    return pick.selection()


def _rule_after(candidate: Carried) -> bool:
    """A later message that states an instruction still in force."""
    return candidate.instruction and not candidate.opening and not candidate.superseded


class _Picker:
    """The texts chosen so far, by candidate position."""

    def __init__(
        self,
        candidates: Sequence[Carried],
        count: Callable[[str], int],
        overhead: int,
        present: Callable[[str], bool] | None,
    ) -> None:
        self.candidates = candidates
        self.count = count
        self.overhead = overhead
        self.present = present
        self.picked: dict[int, str] = {}
        self.shortened: dict[int, int] = {}  # position -> tokens its clip kept
        # Each text's first position: a later copy is a repeat (one dict, not a scan per
        # candidate, so that many short messages cost linear time).
        self.first: dict[str, int] = {}
        for position, candidate in enumerate(candidates):
            self.first.setdefault(candidate.text, position)

    def wanted(self, position: int) -> bool:
        """Not a repeat of an earlier candidate, nor held verbatim elsewhere in the view."""
        text = self.candidates[position].text
        if self.first[text] < position:
            return False
        return self.present is None or not self.present(text)

    def size(self, position: int) -> int:
        candidate = self.candidates[position]
        known = candidate.tokens if candidate.tokens is not None else self.count(candidate.text)
        return known + self.overhead

    def whole(self, position: int, allowance: int) -> int:
        """Takes the candidate whole if it fits `allowance`; returns the tokens used."""
        size = self.size(position)
        if size > allowance:
            return 0
        self.picked[position] = self.candidates[position].text
        return size

    def clipped(self, position: int, allowance: int) -> int:
        """Takes the candidate's head and tail within `allowance`, when that says enough."""
        original = self.candidates[position].text
        text = clip(original, allowance - self.overhead, self.count)
        if text is None:
            self.shortened[position] = 0
            return 0
        self.picked[position] = text
        if text == original:
            return self.size(position)
        used = self.count(text)
        self.shortened[position] = used
        return used + self.overhead

    def selection(self) -> Selection:
        texts = tuple(self.picked[position] for position in sorted(self.picked))
        shortened = tuple(
            Shortened(
                self.candidates[position].index,
                kept,
                self.size(position) - self.overhead,
                self.candidates[position].instruction,
            )
            for position, kept in sorted(self.shortened.items())
        )
        return Selection(texts, shortened)


def clip(text: str, allowance: int, count: Callable[[str], int]) -> str | None:
    """The head and tail of a text within `allowance` tokens, or None if too little fits."""
    if allowance < MIN_CLIP_TOKENS:
        return None
    size = max(count(text), 1)
    if size <= allowance:
        return text
    limit = int(len(text) * allowance / size)
    for _ in range(4):  # the clip marker and uneven token density can overshoot a little
        clipped = clip_middle(text, limit)
        if count(clipped) <= allowance:
            return clipped
        limit = int(limit * 0.85)
    return None
