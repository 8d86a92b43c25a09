"""The working set: what a conversation works on, ranked (pure).

What stays in view when a compression must choose is decided by what the task is about, not
by recency alone. The working set is a pure function of the conversation (the view, with any
handoff an earlier compression left in it): the entities it works on (files, identifiers,
record ids, error names, config keys, URLs), in tiers:

    0 requested   named in the user's own messages (the request and the instructions)
    1 edited      a file the agent edits
    2 re-read     a file the agent reads more than once
    3 newest      named in the newest turn (the last user message or tool result, or the
                  arguments of the model's last call)
    4 seen        anything else the turns name, newest first

Config keys (`VAULT_CODE`) are read off the user's and the agent's words only: a turn that
names one depends on the value a tool gave as `VAULT_CODE: value`, whose anchor ranks with
its key (`compression.verbatim.carry`).

A file that is in tiers 0 to 2 is `core`: its newest read is never dropped for an incidental
one. Reads and edits are found through `compression.verbatim.fileops`' tool table, so every
agent it knows is covered. A path the user writes relative (`src/a.py`) and one a tool
reads absolute (`/repo/src/a.py`) are the same file when one ends with the other.

Across compressions the working set is carried by the handoff (its "Working Set" lines): a
file edited before the last compression stays edited, though the edit itself was summarized.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from compression.messages.content import content_text
from compression.messages.toolpairs import call_parts, tool_calls_of
from compression.messages.types import Message
from compression.summary.handoff import handoff_text, parse_handoff, user_text
from compression.verbatim.anchors import find_anchors
from compression.verbatim.fileops import FileOp, file_ops, normal_path
from compression.verbatim.observations import observation_indices

REQUESTED, EDITED, REREAD, NEWEST, SEEN = range(5)
REASONS = ("named by the user", "edited", "re-read", "in the newest turn", "seen")
CORE_TIERS = (REQUESTED, EDITED, REREAD)
CARRIED_ENTITIES = 12  # at most, in a handoff's Working Set lines
SEEN_LIMIT = 200  # entities kept of tier `seen` (the newest): the rest are noise for ranking

EntityKind = Literal["file", "url", "error", "config", "id"]
_ERROR = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception)")
_FILE = re.compile(r"(?:[\w.-]*/)*[\w-][\w-]*\.[A-Za-z][A-Za-z0-9]{0,7}")
_KEY_NAME = re.compile(r"(?<![\w.-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w-])")  # VAULT_CODE
_CONFIG = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    kind: EntityKind
    tier: int
    reasons: tuple[str, ...]  # every reason that applies, best first
    last: int  # the newest view position that names or touches it


@dataclass(frozen=True, slots=True)
class WorkingSet:
    entities: tuple[Entity, ...] = ()  # best first: by tier, then newest first

    def find(self, name: str) -> Entity | None:
        """The entity `name` is, a file matched by its path's tail."""
        for entity in self.entities:
            if entity.name == name or (entity.kind == "file" and same_file(entity.name, name)):
                return entity
        return None

    def tier(self, name: str) -> int:
        entity = self.find(name)
        return entity.tier if entity is not None else SEEN + 1

    def core(self, name: str) -> bool:
        """Whether the task works on this file (requested, edited or re-read)."""
        return self.tier(name) in CORE_TIERS

    def rank(self, name: str) -> int:
        """Position in the ranking (lower first); unknown names after all known ones."""
        entity = self.find(name)
        return self.entities.index(entity) if entity is not None else len(self.entities)

    def carried(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """What a handoff keeps of it: the core entities with their reasons (`seen` left out
        beside a better one: every entity named is seen), those with the same reasons next to
        each other in the order of their best (the handoff writes them on one line)."""
        core = [e for e in self.entities if e.tier in CORE_TIERS][:CARRIED_ENTITIES]
        groups: dict[tuple[str, ...], list[str]] = {}
        for entity in core:
            why = tuple(r for r in entity.reasons if r != REASONS[SEEN]) or entity.reasons
            groups.setdefault(why, []).append(entity.name)
        return tuple((name, why) for why, names in groups.items() for name in names)


def same_file(a: str, b: str) -> bool:
    """`src/a.py` and `/repo/src/a.py` are one file; `a.py` and `b/a.py` too (a bare name the
    user writes names the file the agent reads)."""
    if a == b:
        return True
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return long.endswith("/" + short.lstrip("/")) and not short.startswith("/")


def entity_kind(name: str) -> EntityKind:
    if name.startswith(("http://", "https://")):
        return "url"
    if _ERROR.fullmatch(name):
        return "error"
    if _FILE.fullmatch(name) or (name.startswith(("/", "./", "~/")) and name.count("/") >= 2):
        return "file"
    if _CONFIG.fullmatch(name):
        return "config"
    return "id"


class _Tally:
    """What is known of each name while the conversation is read."""

    def __init__(self) -> None:
        self.reasons: dict[str, set[int]] = {}
        self.last: dict[str, int] = {}
        self.reads: dict[str, int] = {}
        self.tools: set[str] = set()  # the paths the file tools used

    def add(self, name: str, tier: int, at: int) -> None:
        self.reasons.setdefault(name, set()).add(tier)
        self.last[name] = max(self.last.get(name, -1), at)


def working_set(
    messages: Sequence[Message],
    ops: Sequence[FileOp] | None = None,
    observations: frozenset[int] | None = None,
) -> WorkingSet:
    """The ranked working set of a conversation (`observations`: its user messages that are
    tool observations, when known already)."""
    ops = file_ops(messages) if ops is None else ops
    tally = _Tally()
    if observations is None:
        observations = observation_indices(messages, 0, len(messages))
    newest = _newest_turn(messages)
    for at, message in enumerate(messages):
        _scan(tally, message, at, at in observations, at >= newest)
    for op in ops:
        at = op.result if op.result is not None else op.call
        tally.tools.add(op.path)
        if op.kind == "edit":
            tally.add(op.path, EDITED, at)
        elif op.result is not None:
            tally.reads[op.path] = tally.reads.get(op.path, 0) + 1
            tally.add(op.path, SEEN, at)
    for path, reads in tally.reads.items():
        if reads > 1:
            tally.add(path, REREAD, tally.last[path])
    _merge_files(tally)
    return _ranked(tally)


def _newest_turn(messages: Sequence[Message]) -> int:
    """Where the newest turn starts: the model's last call and what answered it, or the
    user's last message when it is the newest."""
    for at in range(len(messages) - 1, -1, -1):
        role = messages[at].get("role")
        if role == "assistant":
            return at
        if role == "user" and at == len(messages) - 1:
            return at
    return 0


def _scan(tally: _Tally, message: Message, at: int, observation: bool, newest: bool) -> None:
    role = message.get("role")
    summary = handoff_text(message)
    if summary is not None:
        parsed = parse_handoff(summary)
        if parsed is not None:
            handoff = parsed.handoff
            for name, reasons in handoff.working:
                for reason in reasons:
                    if reason in REASONS:
                        tally.add(name, REASONS.index(reason), at)
            for text in handoff.user_messages:
                _names(tally, text, REQUESTED, at)
                _keys(tally, text, REQUESTED, at)
            for path, _ in handoff.files:
                tally.reads[path] = tally.reads.get(path, 0) + 1
                tally.tools.add(path)
                tally.add(path, SEEN, at)
        _names(tally, user_text(message), REQUESTED, at)
        _keys(tally, user_text(message), REQUESTED, at)
        return
    text = content_text(message)
    tier = NEWEST if newest else SEEN
    if role == "user" and not observation:
        # The user's own words: what they name is asked for, and seen (found once).
        _names(tally, text, REQUESTED, at, tier)
        _keys(tally, text, REQUESTED, at)
        return
    if role == "assistant":
        text = "\n".join([text, *(call_parts(call)[1] or "" for call in tool_calls_of(message))])
        _keys(tally, text, tier, at)
    _names(tally, text, tier, at)


def _names(tally: _Tally, text: str, tier: int, at: int, also: int | None = None) -> None:
    for value in find_anchors(text):
        name = normal_path(value) if entity_kind(value) == "file" else value
        if name:
            tally.add(name, tier, at)
            if also is not None:
                tally.add(name, also, at)


def _keys(tally: _Tally, text: str, tier: int, at: int) -> None:
    """Config keys the user or the agent names (`VAULT_CODE`, `DATABASE_URL`): a fact a tool
    gave as `KEY: value` is what a turn that names its key depends on. Not read off tool
    output, where such names are many and incidental."""
    for match in _KEY_NAME.finditer(text):
        tally.add(match.group(0), tier, at)


def _merge_files(tally: _Tally) -> None:
    """A file named one way and read or edited another way is one file: each path the tools
    used gets the reasons of every name of the same file (two tool paths of one file keep
    both, as the reads know them by their own); a name no tool used is folded into them."""
    tools = sorted(p for p in tally.tools if p in tally.reasons)
    for name in sorted(tally.reasons):
        if entity_kind(name) != "file":
            continue
        matches = [p for p in tools if p != name and same_file(p, name)]
        for path in matches:
            tally.reasons[path] = tally.reasons[path] | tally.reasons[name]
            tally.last[path] = max(tally.last[path], tally.last[name])
        if matches and name not in tally.tools:
            del tally.reasons[name], tally.last[name]


def _ranked(tally: _Tally) -> WorkingSet:
    entities = [
        Entity(
            name,
            entity_kind(name),
            min(tiers),
            tuple(REASONS[t] for t in sorted(tiers)),
            tally.last[name],
        )
        for name, tiers in tally.reasons.items()
    ]
    entities.sort(key=lambda e: (e.tier, -e.last))
    core = [e for e in entities if e.tier < SEEN]
    seen = [e for e in entities if e.tier >= SEEN][:SEEN_LIMIT]
    return WorkingSet(tuple(core + seen))


def core_files(working: WorkingSet) -> list[str]:
    return [e.name for e in working.entities if e.kind == "file" and e.tier in CORE_TIERS]


def ordered(working: WorkingSet, names: Sequence[str]) -> list[str]:
    """`names` in working-set order (stable for names it does not know)."""
    return sorted(names, key=working.rank)
