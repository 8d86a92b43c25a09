"""What the handoff carries verbatim: the user's own messages and the anchors (pure).

User messages: candidates are the real user messages of the summarized region (tool
observations sent as `user` by text-action agents are not: they are summarized like tool
results; nor is a client's canned opening) plus those an earlier summary in the region already
carried. All of them are carried while `user_share` of the threshold allows; which go first
when it binds, and how the rest are clipped, is `compression.verbatim.userwords`.

Anchors: exact ids, paths and error names of everything summarized that is not otherwise
kept verbatim, each with the line that says what it is, the working set's first (see
`compression.verbatim.anchors`), within their own budget plus what the user messages left
unused. A value of a key is in view only with its key (`VAULT_CODE: value`; a command that
passes it bare does not say what it is), and ranks with its key where a turn names that; a
value of a config key ranks with the newest turn's names at least.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from compression.assembly.planning import CutPlan
from compression.counting.figures import PassFigures
from compression.messages.content import content_text
from compression.messages.toolpairs import call_parts, tool_calls_of
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, handoff_text, parse_handoff, user_text
from compression.summary.prompts import ANCHORS_HEADER, USER_CLOSE, USER_MESSAGES_HEADER, USER_OPEN
from compression.verbatim.anchors import GLOSS_SHARE, AnchorIndex, Collector, select_anchors
from compression.verbatim.commands import COMMAND_SHARE, commands_of, select_commands
from compression.verbatim.labels import is_key, keyed_as, system_path
from compression.verbatim.observations import observation_indices
from compression.verbatim.usermessages import UserMessages, user_messages
from compression.verbatim.userwords import ORIGIN_CLIP_TOKENS, Carried, Selection, select_carried
from compression.verbatim.workingset import NEWEST, WorkingSet, entity_kind

USER_TIER, AGENT_TIER, TOOLS_TIER = 0, 1, 2
SYSTEM_RANK = 99  # after every tier of the working set, and names it does not know


def carry_candidates(
    messages: Sequence[Message],
    start: int,
    end: int,
    skip: int | None,
    figures: PassFigures,
    pinned: frozenset[int] = frozenset(),
    words: UserMessages | None = None,
) -> list[Carried]:
    """Oldest first. `skip` is the newest user message when it is restated separately;
    `pinned` are messages the view keeps verbatim outside the summary; `words` is the view's
    reading by `compression.verbatim.usermessages.user_messages` when the pass has it.

    The opening candidates are the user messages sent before the first reply, or else the
    first message an earlier summary carried (where that summary kept the original request).
    A client's canned opening (examples, acknowledged context) is neither: it is not carried.
    The user's messages after `end` are not candidates, but one may take back one before.
    """
    if words is None:
        words = user_messages(messages, figures)
    return words.candidates(start, end, skip, pinned)


class CarryNeed(NamedTuple):
    """What carrying the user's messages after the head would cost, all of them and the
    original request's share of it."""

    total: int = 0
    origin: int = 0  # the original request (what was sent before the first reply)


def carry_need(
    messages: Sequence[Message],
    head: int,
    figures: PassFigures,
    pinned: frozenset[int],
    words: UserMessages | None = None,
) -> CarryNeed:
    """What carrying every user message after the head would cost (the tail's own included:
    where the cut falls is not known yet, and the tail is short)."""
    candidates = carry_candidates(messages, head, len(messages), None, figures, pinned, words)
    if not candidates:
        return CarryNeed()
    count = figures.counter.count_text
    overhead = count(f"{USER_OPEN}\n\n{USER_CLOSE}\n")
    header = count(USER_MESSAGES_HEADER)
    total = origin = header
    for candidate in candidates:
        size = overhead + (
            candidate.tokens if candidate.tokens is not None else count(candidate.text)
        )
        total += size
        if candidate.opening:
            origin += size
    return CarryNeed(total, origin if origin > header else 0)


# The anchors' own budget where the user's words yield: the best-ranked few with their lines
# (its header included), at most a 1/YIELD_ANCHOR_DIVISOR share of the pass's limit.
YIELD_ANCHOR_TOKENS = 120
YIELD_ANCHOR_DIVISOR = 50


def yield_floor(count: Callable[[str], int]) -> int:
    """The carry budget the user's words never yield below: the section with a clip of the
    original request's first lines. A handoff that drops it loses the task statement for every
    later compression (each reads the user's words back from the handoff it replaces), while
    the tokens it saves rarely decide whether a forced pass fits."""
    overhead = count(f"{USER_OPEN}\n\n{USER_CLOSE}\n")
    return count(USER_MESSAGES_HEADER) + ORIGIN_CLIP_TOKENS + overhead


def anchor_candidates(
    messages: Sequence[Message],
    start: int,
    end: int,
    per_tier: int,
    observations: frozenset[int] | None = None,
) -> Collector:
    """Anchors of `messages[start:end]` by tier, newest first, each with the line it was
    found on (`per_tier` bounds the scan)."""
    if observations is None:
        observations = observation_indices(messages, start, end)
    collector = Collector(per_tier)
    for index in range(end - 1, start - 1, -1):
        message = messages[index]
        summary = handoff_text(message)
        if summary is not None:
            # Read even when every tier is full: its anchors an earlier pass chose, and left
            # out, what it carried would be gone for good behind the newer turns' ids.
            parsed = parse_handoff(summary)
            if parsed is not None:
                _add_handoff(collector, parsed.handoff)
            collector.scan(USER_TIER, user_text(message))
            continue
        settings, done = collector.wants_settings(), collector.done()
        if done and not settings:
            continue
        role = message.get("role")
        if role == "user":
            tier = TOOLS_TIER if index in observations else USER_TIER
        else:
            tier = TOOLS_TIER if role == "tool" else AGENT_TIER
        # A full tier reads no more than its settings (its text put together only for them).
        if collector.wants(tier) or settings:
            text = _text(message) if tier == AGENT_TIER else content_text(message)
            if collector.wants(tier):
                collector.scan(tier, text)
            if settings:
                collector.settings(tier, text)
        if tier == AGENT_TIER and not done:
            collector.ran(reversed(commands_of(message)))
    return collector


def _add_handoff(collector: Collector, handoff: Handoff) -> None:
    """An earlier handoff: its own anchors, then what its carried texts and body name."""
    meaning = handoff.anchors.glosses()
    for tier, values in enumerate(handoff.anchors.tiers()):
        collector.add(tier, values, meaning=meaning)
    collector.ran(handoff.anchors.commands)
    for text in reversed(handoff.user_messages):
        collector.scan(USER_TIER, text)
    collector.scan(AGENT_TIER, handoff.last_reply or "")
    collector.scan(AGENT_TIER, handoff.body)


def carry_section(
    messages: Sequence[Message],
    plan: CutPlan,
    figures: PassFigures,
    options: CompressorOptions,
    count: Callable[[str], int],
    kept: Sequence[Message | str],
    pinned: frozenset[int] = frozenset(),
    prose: Sequence[str] = (),
    working: WorkingSet | None = None,
    words: UserMessages | None = None,
) -> tuple[Selection, AnchorIndex]:
    """The user messages and anchors a handoff carries for the plan's summarized region.

    `kept` is what the compressed view holds verbatim besides (head, tail, …): a user message
    it holds needs no copy, nor does an anchor. `prose` is what ctxgate wrote around them (the
    summary body, the carried reply): it spares anchors, never a user message, since a real
    summary model paraphrases what it quotes. `pinned` messages of the region are not carried.
    `words` is the view's reading of its user messages, when the pass has it.
    """
    start, end = plan.head_end, plan.tail_start
    budgets = plan.budgets
    # The restated message is kept without the earlier handoff merged into it (this one
    # replaces it): what that handoff carried is not in view for being there.
    restate = messages[plan.restate] if plan.restate is not None else None
    kept_text = "\n".join(user_text(i) if i is restate else _text(i) for i in kept)
    if words is None:
        words = user_messages(messages, figures)
    candidates = words.candidates(start, end, plan.restate, pinned)
    overhead = count(f"{USER_OPEN}\n\n{USER_CLOSE}\n")
    header = count(USER_MESSAGES_HEADER) if candidates else 0
    # Exactly as a message of its own: a short message found inside a longer one is not kept.
    own = {user_text(item) for item in kept if not isinstance(item, str)}
    users = select_carried(candidates, budgets.carry - header, count, overhead, own.__contains__)
    used = header + sum(count(text) + overhead for text in users.texts) if users.texts else 0
    spare = max(0, budgets.carry - used)
    room = min(budgets.anchors + spare, options.max_anchor_tokens) - count(ANCHORS_HEADER) - 4
    if room <= 0:
        return users, AnchorIndex()
    present = "\n".join([*users.texts, kept_text, *prose])
    # An anchor costs at least ~3 tokens with its separator: room // 3 per tier always fills.
    found = anchor_candidates(messages, start, end, room // 3, words.observations)
    rank = _ranking(working or WorkingSet(), found.labels)
    commands, used = select_commands(
        found.commands, int(room * COMMAND_SHARE), count, present.__contains__
    )
    # an anchor a carried command names is in view with it
    present = "\n".join([present, *commands])
    chosen = select_anchors(
        found.candidates(),
        room - used,
        count,
        _shown(present, found.labels),
        found.meaning,
        rank,
        found.labels,
        int(room * GLOSS_SHARE),  # the commands take from the names, not from their lines
    )
    return users, replace(chosen, commands=commands)


def _shown(present: str, labels: Mapping[str, str]) -> Callable[[str], bool]:
    """Whether the view holds an anchor: a value of a key with its key (`VAULT_CODE: value`,
    `"flight_number": "HAT009"`), any other anywhere."""

    def shown(value: str) -> bool:
        if value not in present:
            return False
        key = labels.get(value, "")
        return not is_key(key) or keyed_as(present, value, key)

    return shown


def _ranking(working: WorkingSet, labels: Mapping[str, str]) -> Callable[[str], int]:
    """An anchor's working-set tier, or its key's where the key ranks better: a turn that
    names `VAULT_CODE` depends on the value a tool gave as `VAULT_CODE: value`. A value of a
    config key ranks with the newest turn's names at least: a setting a tool stated once is
    what a later command passes, while the other ids of tool output (a listing's records, a
    decompiler's locals) come again with the next call that needs them; without this the
    setting, re-read from each handoff behind the newer turns' ids, yields to them for good."""

    def rank(value: str) -> int:
        if system_path(value):  # the system's own paths after everything the task named
            return SYSTEM_RANK
        tier = working.tier(value)
        key = labels.get(value, "")
        if not is_key(key) or entity_kind(key) != "config":
            return tier
        return min(tier, working.tier(key), NEWEST)

    return rank


def _text(item: Message | str) -> str:
    """What a model reads of a message: its text and its tool-call arguments. Of a message
    that carries an earlier handoff (the newest user message it was merged into), only the
    user's words: the new handoff replaces that one, with what it named."""
    if isinstance(item, str):
        return item
    if handoff_text(item) is not None:
        return user_text(item)
    parts = [content_text(item)]
    parts += [call_parts(call)[1] or "" for call in tool_calls_of(item)]
    return "\n".join(parts)
