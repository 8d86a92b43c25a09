"""Reference content a client placed in the conversation, kept verbatim by every compression
(pure).

    pinned = find_pins(view, tokens, paste_tokens, count_text)     what is pinned
    plan = plan_pins(pinned, budget, count_message)                what of it fits

Three kinds of message are pinned (user messages only; never the newest user message, which
compression keeps anyway, nor a text agent's command output, see
`compression.verbatim.observations`):

    files      aider's "I have *added these files to the chat* …" (its ask mode's variant too)
    read-only  aider's "Here are some READ ONLY files, provided for your reference. …"
    marker     a message whose text starts with `[ctxgate:pin]` (the documented convention)
    paste      a user message of at least `pin_paste_tokens` tokens: pasted material

The first three are the client's word that the content must stay ("hard" pins). A paste is a
guess: people do not type 1,500 tokens (about 6,000 characters, the length the summary model
already reads only the head and tail of); a message that long is a log, a spec or a file put
there for the model to read, which a summary cannot reproduce. Only the newest copy of each
is pinned: aider resends its files message every turn, and a client may paste a text twice.

What fits: hard pins take the budget first; when they exceed it, each is clipped (head and
tail kept, the middle cut), the largest first to a common size, none below `MIN_KEEP` of
its own; when even that does not fit, a clip would drop most of what the client placed and the
plan refuses instead, saying what is pinned and how large. Pastes then take what is left,
newest first and whole; a paste that does not fit is summarized like any other message (a
guess never clips, never refuses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from compression.assembly.planning import newest_user
from compression.engine import ClippedMessage
from compression.messages.content import clip_middle, content_text, with_text
from compression.messages.types import ContentPart, Message
from compression.summary.handoff import handoff_text, user_text
from compression.verbatim.observations import is_observation
from compression.verbatim.preamble import system_end

PIN_MARKER = "[ctxgate:pin]"
AIDER_FILES = "I have *added these files to the chat*"
AIDER_READ_ONLY = "Here are some READ ONLY files"
MIN_KEEP = 0.5  # of a hard pin's tokens, the least a clip may keep
MIN_CUT_TOKENS = 32  # cutting less than this from a pin is not worth the clip marker
CLIP_TRIES = 4  # the clip marker and uneven token density can overshoot a little

Kind = Literal["files", "read-only", "marker", "paste"]
HARD_KINDS: frozenset[str] = frozenset({"files", "read-only", "marker"})
_DESCRIPTIONS = {
    "files": "aider's added files",
    "read-only": "aider's read-only files",
    "marker": f"a {PIN_MARKER} message",
    "paste": "a pasted document",
}


@dataclass(frozen=True, slots=True)
class Pin:
    index: int  # position in the view
    kind: Kind
    tokens: int  # of `message`
    message: Message  # what the compressed view holds: the view's own object, or its clip
    original_tokens: int = 0  # before clipping (0: not clipped)

    @property
    def hard(self) -> bool:
        return self.kind in HARD_KINDS

    def describe(self) -> str:
        size = self.original_tokens or self.tokens
        return f"{_DESCRIPTIONS[self.kind]} (message {self.index}, {size:,} tokens)"


@dataclass(frozen=True, slots=True)
class PinPlan:
    pins: tuple[Pin, ...] = ()  # kept verbatim or clipped, oldest first
    budget: int = 0
    refused: str | None = None  # why the hard pins cannot fit, even clipped

    @property
    def indices(self) -> frozenset[int]:
        return frozenset(pin.index for pin in self.pins)

    @property
    def tokens(self) -> int:
        return sum(pin.tokens for pin in self.pins)

    @property
    def clipped(self) -> tuple[ClippedMessage, ...]:
        return tuple(
            ClippedMessage(pin.index, pin.tokens, pin.original_tokens)
            for pin in self.pins
            if pin.original_tokens
        )

    def tokens_in(self, start: int, end: int) -> int:
        return sum(pin.tokens for pin in self.pins if start <= pin.index < end)

    def apply(self, view: Sequence[Message]) -> list[Message]:
        """The view with each pin's message in place (its clip where it was clipped)."""
        out = list(view)
        for pin in self.pins:
            out[pin.index] = pin.message
        return out


def pin_kind(
    message: Message, tokens: int, paste_tokens: int, said: str | None = None
) -> Kind | None:
    """Which kind of pin a user message is, if any (`tokens`: its size; `said`: its
    `user_text`, when read already)."""
    if message.get("role") != "user":
        return None
    text = (user_text(message) if said is None else said).lstrip()
    if text.startswith(PIN_MARKER):
        return "marker"
    if text.startswith(AIDER_FILES):
        return "files"
    if text.startswith(AIDER_READ_ONLY):
        return "read-only"
    if paste_tokens and tokens >= paste_tokens:
        return "paste"
    return None


def find_pins(
    messages: Sequence[Message],
    tokens: Sequence[int],
    paste_tokens: int,
    count_text: Callable[[str], int],
) -> list[Pin]:
    """The pinned messages of a view, oldest first: the newest copy of each."""
    newest = newest_user(messages)
    seen: set[str] = set()
    found: list[Pin] = []
    for index in range(len(messages) - 1, system_end(messages) - 1, -1):
        message = messages[index]
        if index == newest or message.get("role") != "user":
            continue
        said = user_text(message)
        own = _own_text(message, said)
        size = tokens[index] if own is None else count_text(own)
        kind = pin_kind(message, size, paste_tokens, said)
        if kind is None or (kind == "paste" and is_observation(messages, index)):
            continue  # a command output the harness sent back is work, not a paste
        key = kind if kind in ("files", "read-only") else said
        if key in seen:
            continue
        seen.add(key)
        placed = message if own is None else with_text(message, own)
        found.append(Pin(index, kind, size, placed))
    found.reverse()
    return found


def plan_pins(
    pinned: Sequence[Pin], budget: int, count_message: Callable[[Message], int]
) -> PinPlan:
    """What of the pinned messages stays, within `budget` tokens (see the module docstring)."""
    hard = [pin for pin in pinned if pin.hard]
    total = sum(pin.tokens for pin in hard)
    if total > budget:
        if total * MIN_KEEP > budget:
            return PinPlan((), budget, _refusal(hard, total, budget))
        targets = clip_targets([pin.tokens for pin in hard], budget)
        hard = [
            _clipped(pin, target, count_message) if target < pin.tokens else pin
            for pin, target in zip(hard, targets, strict=True)
        ]
    room = budget - sum(pin.tokens for pin in hard)
    kept = list(hard)
    for pin in reversed([pin for pin in pinned if not pin.hard]):
        if pin.tokens <= room:
            kept.append(pin)
            room -= pin.tokens
    kept.sort(key=lambda pin: pin.index)
    return PinPlan(tuple(kept), budget)


def clip_targets(sizes: Sequence[int], budget: int) -> list[int]:
    """Tokens each pin keeps so they total at most `budget` (when half of each fits): the
    largest are cut to a common cap first, none below `MIN_KEEP` of its size, so a short pin
    is not cut to nothing for a large one's sake."""
    floors = [int(size * MIN_KEEP) for size in sizes]

    def kept(cap: int) -> list[int]:
        return [max(floor, min(size, cap)) for size, floor in zip(sizes, floors, strict=True)]

    low, high = 0, max(sizes, default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(kept(middle)) <= budget:
            low = middle
        else:
            high = middle - 1
    return kept(low)


def _refusal(hard: Sequence[Pin], total: int, budget: int) -> str:
    listed = "; ".join(pin.describe() for pin in hard[:4])
    more = f"; and {len(hard) - 4} more" if len(hard) > 4 else ""
    return (
        f"the pinned content ({total:,} tokens: {listed}{more}) does not fit in the "
        f"{budget:,} tokens pinned content may take (compression.options.pin_share) even "
        "with half of it clipped: drop files from the chat (aider: /drop) or unpin them, "
        "or use a model with a larger window"
    )


def _clipped(pin: Pin, keep: int, count_message: Callable[[Message], int]) -> Pin:
    """The pin's message cut to about `keep` tokens, its head and tail kept (whole when so
    little would be cut that the clip marker outweighs it)."""
    if pin.tokens - keep < MIN_CUT_TOKENS:
        return pin
    share = keep / max(pin.tokens, 1)
    clipped = pin.message
    size = pin.tokens
    for _ in range(CLIP_TRIES):
        clipped = _clip_content(pin.message, share)
        size = count_message(clipped)
        if size <= keep:
            break
        share *= min(keep / size, 0.98)
    return Pin(pin.index, pin.kind, size, clipped, pin.tokens)


def _clip_content(message: Message, share: float) -> Message:
    content: Any = message.get("content")
    if isinstance(content, list):
        parts: list[ContentPart] = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and part.get("type", "text") == "text":
                shorter = part.copy()
                shorter["text"] = clip_middle(text, int(len(text) * share))
                parts.append(shorter)
            else:
                parts.append(part)
        changed = message.copy()
        changed["content"] = parts
        return changed
    text = content_text(message)
    return with_text(message, clip_middle(text, int(len(text) * share)))


def _own_text(message: Message, own: str) -> str | None:
    """The message's own text (`own`: its `user_text`) when an earlier compression wrote into
    it (a summary merged in, a restatement marker), else None: a pin is kept as the client
    sent it, not with those."""
    if handoff_text(message) is None and own == content_text(message):
        return None
    return own
