"""The user's messages of a view as the handoff's carry reads them, read once per pass (pure).

A pass asks twice which user messages a handoff would carry: once over everything after the
head (what carrying them would cost, before the cut is known) and once over the summarized
region (what it carries). Both read the same messages; this reads each message once, and the
two questions differ only in their range, the message restated apart and the pinned ones,
which `UserMessages.candidates` applies. What one message says does not depend on them: a
message is a tool observation or not by itself and the message before it, and "sent before
any reply" counts from the end of the canned opening.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from compression.counting.figures import PassFigures
from compression.messages.content import content_text
from compression.messages.types import Message
from compression.summary.handoff import (
    handoff_text,
    parse_handoff,
    user_text,
    without_recalled,
    without_restatement,
)
from compression.verbatim.instructions import states_instruction
from compression.verbatim.observations import has_output_marker, observation_indices
from compression.verbatim.preamble import preamble_end
from compression.verbatim.userwords import Carried, mark_superseded


class Said(NamedTuple):
    """What one message of the view gives the carry (a tuple: one per message of a long
    view, built several times faster than a frozen dataclass)."""

    at: int  # its index in the view
    own: bool  # the user's own words (a user message, not a tool observation)
    text: str  # what the user wrote in it ("" when not `own`)
    carried: Carried | None  # the candidate it is, when it is carried
    quoted: tuple[tuple[str, bool], ...] = ()  # an earlier handoff's carried texts
    replied: bool = False  # a reply (or a summary) came before it, after the canned opening


@dataclass(frozen=True, slots=True)
class UserMessages:
    """The messages of a view that say something to the carry, in order."""

    canned: int  # where the canned opening ends
    said: tuple[Said, ...]
    observations: frozenset[int]  # user messages of the whole view that are tool observations

    def candidates(
        self, start: int, end: int, skip: int | None, pinned: frozenset[int] = frozenset()
    ) -> list[Carried]:
        """The carry candidates of `[start, end)`, oldest first (see
        `compression.verbatim.carry.carry_candidates`)."""
        found: list[Carried | str] = []  # a string: a user message kept in view anyway
        carried_any = False
        later: list[str] = []
        first = max(start, self.canned)
        for said in self.said:
            index = said.at
            if index >= end:
                if said.own:
                    later.append(said.text)
                continue
            if index < first:
                continue
            for text, instruction in said.quoted:
                opening = not said.replied and not carried_any
                found.append(Carried(text, None, instruction, opening, index))
                carried_any = True
            if not said.own:
                continue
            if index == skip or index in pinned:
                found.append(said.text)
            elif said.carried is not None:
                found.append(said.carried)
                carried_any = True
        return mark_superseded([*found, *later])


def user_messages(
    messages: Sequence[Message],
    figures: PassFigures,
    observations: frozenset[int] | None = None,
    originals: Mapping[str, str] | None = None,
) -> UserMessages:
    """Each user message and earlier handoff of `messages`, read once.

    `observations` are the tool observations of the whole view when known already;
    `originals` the whole text of messages an earlier handoff carries clipped, by the clip."""
    if observations is None:
        observations = observation_indices(messages, 0, len(messages))
    canned = preamble_end(messages)
    said: list[Said] = []
    replied = False
    for index, message in enumerate(messages):
        summary = handoff_text(message)
        own = message.get("role") == "user" and index not in observations
        before = replied
        if index >= canned:
            replied = replied or summary is not None or message.get("role") == "assistant"
        if summary is None and not own:
            continue
        quoted: tuple[tuple[str, bool], ...] = ()
        if summary is not None:
            parsed = parse_handoff(summary)
            if parsed is not None:
                texts = [(originals or {}).get(t, t) for t in parsed.handoff.user_messages]
                quoted = tuple((text, states_instruction(text)) for text in texts)
        if summary is None:
            # `user_text`, without reading the message's content again
            content = content_text(message)
            text = without_recalled(without_restatement(content)) if own else ""
            plain = text == content
        else:
            text, plain = (user_text(message) if own else ""), False
        # A message a summary was merged into comes after what the summary stands for.
        carried = _carried(index, text, summary, plain, figures, replied)
        said.append(Said(index, own, text, carried, quoted, before))
    return UserMessages(canned, tuple(said), observations)


def _carried(
    index: int,
    text: str,
    summary: str | None,
    plain: bool,
    figures: PassFigures,
    replied: bool,
) -> Carried | None:
    if summary is not None and has_output_marker(text):
        return None  # a tool observation the summary was merged into
    if not text.strip():
        return None
    known = figures.tokens[index] if plain else None  # the message is its text
    return Carried(text, known, states_instruction(text), not replied, index)
