"""Anchors: short exact tokens from the compacted turns, kept verbatim in the handoff.

A summary paraphrases; an agent that continues the work needs the exact record ids, paths,
error names and URLs it saw (a reservation id from a lookup, the path a search found, the
exception a test raised). The handoff keeps an index of them, in three tiers that say where
each was seen, newest first:

    ## Anchors (exact ids, paths and names from the compacted turns, newest first)
    - user: mia_li_3668 — Book the 9:40 flight for mia_li_3668 on Friday.
    - agent: HAT136 — search_flights(flight="HAT136", date="2024-05-03")
    - tools: ZeroDivisionError — File "/repo/src/app.py", line 9, in total: ZeroDivisionError

`user` = written by the user; `agent` = used in the assistant's text or tool-call arguments
(what the conversation acted on); `tools` = only seen in tool output. A name alone says little,
so no anchor is written bare: the best-ranked come with the line they were found on (`key: value`,
`id — what it is`), cut to `MAX_GLOSS_CHARS`; every other one with its label, the key it was the
value of (`reservation_id`, `flight_number`) or the words before it on its line, or else its kind
(`file`, `error`, `url`, `id`; see `compression.verbatim.labels`). A value of a key is always
written `key: value`: its line would say no more. Anchors of one tier with one label share a line:

    - tools: flight_number: HAT009, HAT013, HAT017

Within a tier the working set's entities come first (see `compression.verbatim.workingset`),
then the newest. Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from compression.verbatim.commands import parse_command, render_commands
from compression.verbatim.labels import (
    MAX_LABEL_CHARS,
    is_key,
    keyed,
    kind,
    label,
    says_more,
    settings,
)

TIERS = ("user", "agent", "tools")
TIER_SHARES = (0.4, 0.3, 0.3)  # of the anchor budget, before leftovers flow down the tiers
SEPARATOR = ", "
MAX_ANCHOR_CHARS = 120
SCAN_HEAD_CHARS = 4000  # of a long text: ids sit at the start of records and outputs,
SCAN_TAIL_CHARS = 1500  # outcomes and final values at the end
SCAN_CHARS_PER_TIER = 30_000  # newest first; bounds the work on huge regions (~2 ms a tier)
SETTINGS_SCAN_CHARS = 2_000_000  # of a region, read whole for settings lines (~10 ms)
MAX_GLOSS_CHARS = 100  # of the line that says what an anchor is
GLOSS = " — "
KEY = ": "  # after a label written before its names
_SENTENCE_ENDS = (". ", "! ", "? ")
GLOSS_SHARE = 0.5  # of the anchors' budget, what their lines may take besides
MIN_ANCHOR_COST = 2  # tokens: a name and its separator, the least any anchor takes

_CODE_EXTENSIONS = (
    "py|pyi|js|mjs|ts|tsx|jsx|json|ya?ml|toml|cfg|ini|conf|txt|md|rst|c|h|cc|cpp|hpp|go|rs|"
    "java|kt|rb|php|sh|html|css|scss|sql|lock|env|xml|csv|log|ipynb|sol|swift"
)
# Tokens first (one fast pass), then each token is classified: a per-position alternation of
# all the shapes below is an order of magnitude slower on long tool outputs.
_TOKEN = re.compile(r"[^\s\"'<>()\[\]{},;`|*]{4,}")
_EDGE = ".,:;!?`'\"#"
_LEAD = ",:;!?`'\"#"  # a leading dot stays: ./run.sh
_URL = re.compile(r"https?://[^\s\"'<>()\[\]{},]{3,200}")
_PATH = re.compile(r"(?:~|\.{1,2})?/?(?:[\w-][\w.-]*/)*[\w-][\w.-]*")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_FILE = re.compile(rf"[\w-]+\.(?:{_CODE_EXTENSIONS})")
_ERROR = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception)")
_ID = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+")
_CODE = re.compile(r"[A-Z0-9]{5,16}")
_HEX = re.compile(r"[0-9a-f]{7,64}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True, slots=True)
class AnchorIndex:
    """The anchors of a handoff by tier, each newest first."""

    user: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    meaning: tuple[tuple[str, str], ...] = ()  # (anchor, the line that says what it is)
    commands: tuple[str, ...] = ()  # what the agent ran, newest first

    def glosses(self) -> dict[str, str]:
        return dict(self.meaning)

    def tiers(self) -> tuple[tuple[str, ...], ...]:
        return (self.user, self.agent, self.tools)

    def __bool__(self) -> bool:
        return bool(self.user or self.agent or self.tools or self.commands)


def find_anchors(text: str) -> tuple[str, ...]:
    """Distinct anchors of `text` in order of appearance (long texts: head and tail only)."""
    return _find(_bounded(text))


def _bounded(text: str) -> str:
    if len(text) > SCAN_HEAD_CHARS + SCAN_TAIL_CHARS:
        return text[:SCAN_HEAD_CHARS] + "\n" + text[-SCAN_TAIL_CHARS:]
    return text


def gloss(text: str, value: str) -> str:
    """The line of `text` that `value` is on, cut to `MAX_GLOSS_CHARS` around it; "" when
    the line says nothing more than the value."""
    at = text.find(value)
    if at < 0:
        return ""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start : end if end >= 0 else len(text)]
    offset = at - start
    if len(line) > MAX_GLOSS_CHARS:
        low = max(0, min(offset - MAX_GLOSS_CHARS // 3, len(line) - MAX_GLOSS_CHARS))
        # From the start of its sentence where that fits: "The code for the gate is X."
        sentence = max(line.rfind(mark, 0, offset) for mark in _SENTENCE_ENDS) + 2
        if sentence >= 2 and offset + len(value) - sentence <= MAX_GLOSS_CHARS:
            low = min(sentence, len(line) - MAX_GLOSS_CHARS)
        line = (
            ("…" if low else "")
            + line[low : low + MAX_GLOSS_CHARS]
            + ("…" if low + MAX_GLOSS_CHARS < len(line) else "")
        )
    line = " ".join(line.replace(GLOSS.strip(), "-").split())
    return "" if len(line) <= len(value) + 3 else line


@lru_cache(maxsize=2048)  # keyed by the bounded text; the same turns are scanned again on
def _find(text: str) -> tuple[str, ...]:  # every later compression of a session
    found: dict[str, None] = {}
    for token in _TOKEN.findall(text):
        if token.isalpha():  # plain words, most tokens: only an error name is an anchor
            if token.endswith(("Error", "Exception")) and _ERROR.fullmatch(token):
                found.setdefault(token, None)
            continue
        if token.isdigit():
            continue
        for value in _classify(_trim(token)):
            found.setdefault(value, None)
    return tuple(found)


def clear_caches() -> None:
    """Forget memoized scans (benchmarks measuring a cold pass)."""
    _find.cache_clear()


def _trim(token: str) -> str:
    return token.rstrip(_EDGE).lstrip(_LEAD)


def _classify(token: str) -> list[str]:
    if token.startswith(("http://", "https://")):
        return [token] if _URL.fullmatch(token) else []
    if "=" in token or ":" in token:
        # key=value, path:line, Error: — the parts are the candidates
        parts = token.replace("=", ":").split(":")
        return [value for part in parts if len(part) >= 4 for value in _classify(_trim(part))]
    if len(token) < 4 or len(token) > MAX_ANCHOR_CHARS:
        return []
    if "/" in token:
        if _PATH.fullmatch(token) is None:
            return []
        # "and/or", "n/a", "1/2": a path needs a file extension or at least two separators
        keep = _EXTENSION.search(token) is not None or token.count("/") >= 2
        return [token] if keep else []
    if _is_anchor(token):
        return [token]
    return []


def _is_anchor(token: str) -> bool:
    if _FILE.fullmatch(token) or _ERROR.fullmatch(token):
        return True
    has_digit = _DIGIT.search(token) is not None
    if not has_digit or _LETTER.search(token) is None:
        return False
    if _ID.fullmatch(token):
        return len(token) >= 6 and _DATE.match(token) is None
    return _CODE.fullmatch(token) is not None or _HEX.fullmatch(token) is not None


class Collector:
    """Anchors gathered newest first into tiers; a value belongs to the best tier it is in.

    A tier stops taking text once it holds `per_tier` anchors or has scanned its share of
    characters: older text only matters when the newer did not fill the budget.
    """

    def __init__(self, per_tier: int) -> None:
        self.per_tier = per_tier
        self._tier: dict[str, int] = {}
        self._tiers: tuple[dict[str, None], ...] = ({}, {}, {})
        self._scanned = [0, 0, 0]
        self._settings_scanned = 0
        self.meaning: dict[str, str] = {}  # each anchor's line, from the text it was taken
        self.labels: dict[str, str] = {}  # each anchor's label (what it is, in a few words)
        self.commands: dict[str, None] = {}  # what the agent ran, newest first

    def scan(self, tier: int, text: str) -> None:
        """Add the anchors found in `text`, if the tier still wants more."""
        if text and self.wants(tier):
            bounded = _bounded(text)
            self._scanned[tier] += len(bounded)
            self.add(tier, _find(bounded), bounded)

    def wants_settings(self) -> bool:
        return self._settings_scanned < SETTINGS_SCAN_CHARS

    def settings(self, tier: int, text: str) -> None:
        """The settings of `text` (`VAULT_CODE: value` lines), read whole even where the tier
        scans no more: one is stated once, and what a later command passes."""
        self._settings_scanned += len(text)
        for value, line in settings(text):
            if _is_anchor(value) and value not in self._tier:
                self.add(tier, (value,), line)

    def add(
        self,
        tier: int,
        values: Iterable[str],
        text: str = "",
        meaning: dict[str, str] | None = None,
    ) -> None:
        """Add `values` to `tier`; their meaning is their line of `text`, or `meaning`'s."""
        bucket = self._tiers[tier]
        for value in values:
            known = self._tier.get(value)
            if known is not None and known <= tier:
                self._keyed(value, text, meaning or {})
                continue
            if known is not None:
                del self._tiers[known][value]
            self._tier[value] = tier
            bucket[value] = None
            line = gloss(text, value) if text else (meaning or {}).get(value, "")
            said = label(text or line, value)
            if not text and line and value not in line:
                said, line = line[:MAX_LABEL_CHARS], ""  # a handoff's label
            key = keyed(text or line, value)  # on any of its lines, not only its first
            if key:
                said, line = key, ""  # `key: value` says what it is, and as its text says it
            if line:
                self.meaning[value] = line
            elif known is None:
                self.meaning.pop(value, None)
            if text or line or known is None:
                self.labels[value] = said

    def _keyed(self, value: str, text: str, meaning: Mapping[str, str]) -> None:
        """An anchor met again in older text, or an earlier handoff, where it is the value of
        a key (a command used the code a tool gave as `VAULT_CODE: code`): the key says what
        it is."""
        if is_key(self.labels.get(value, "")):
            return
        if text:
            key = keyed(text, value)
        else:  # a handoff's label, written before the value
            said = meaning.get(value, "")
            key = said if value not in said and is_key(said) else ""
        if key:
            self.labels[value] = key
            self.meaning.pop(value, None)

    def ran(self, commands: Iterable[str]) -> None:
        """Commands of an older message (or an earlier handoff's, newest first)."""
        for command in commands:
            self.commands.setdefault(command, None)

    def wants(self, tier: int) -> bool:
        return len(self._tiers[tier]) < self.per_tier and self._scanned[tier] < SCAN_CHARS_PER_TIER

    def done(self) -> bool:
        """Every tier full, and as many commands as a tier holds: older messages may still
        hold the commands the newest did not run (a clone, a build at the start)."""
        tiers_full = not (self.wants(0) or self.wants(1) or self.wants(2))  # one per tier
        return tiers_full and len(self.commands) >= self.per_tier

    def candidates(self) -> tuple[list[str], ...]:
        return tuple(list(bucket) for bucket in self._tiers)


def select_anchors(
    tiers: Sequence[Sequence[str]],
    budget: int,
    count: Callable[[str], int],
    present: Callable[[str], bool],
    meaning: Mapping[str, str] | None = None,
    rank: Callable[[str], int] | None = None,
    labels: Mapping[str, str] | None = None,
    line_room: int | None = None,
) -> AnchorIndex:
    """Anchors with what they are within `budget` tokens, skipping what the view already holds
    verbatim, and the lines that say more within `line_room` (half as much again by default)
    plus what the names leave. `rank` orders each tier (stable: ties stay newest first), the
    working set's entities first.

    Each tier first gets its share of the budget; what a tier leaves unused goes to the
    others in tier order, so a session without user-stated ids spends it on tool ids. An
    anchor costs its name plus, the first time its tier uses it, its label (`labels`, else its
    kind): a name the model cannot place says little, while anchors of one kind share a label.
    One too long for what is left is passed over for the shorter ones after it. The
    best-ranked anchors then get their whole line instead, and what the lines leave of their
    room goes to more names.
    """
    chosen: list[list[str]] = [[] for _ in TIERS]
    if budget <= 0:
        return AnchorIndex()
    meaning = meaning or {}
    said = labels or {}
    ordered = [sorted(tier, key=rank) if rank is not None else tier for tier in tiers]
    queues = [_Queue(tier, present, said) for tier in ordered]
    left = budget
    for position, share in enumerate(TIER_SHARES):
        left -= queues[position].fill(chosen[position], int(budget * share), count)
    for position in range(len(TIERS)):
        left -= queues[position].fill(chosen[position], left, count)
    if line_room is None:
        line_room = int(budget * GLOSS_SHARE)
    lines, unspent = _glossed(chosen, meaning, line_room + max(0, left), count)
    for position in range(len(TIERS)):  # what the lines left goes to more names
        unspent -= queues[position].fill(chosen[position], unspent, count)
        order = {value: at for at, value in enumerate(ordered[position])}
        chosen[position].sort(key=order.__getitem__)
    grouped: list[tuple[str, ...]] = []
    kept: list[tuple[str, str]] = []
    for tier in chosen:
        runs: dict[str, list[str]] = {}
        for value in tier:
            runs.setdefault(lines.get(value) or said.get(value) or kind(value), []).append(value)
        grouped.append(tuple(value for run in runs.values() for value in run))
        kept += [(value, line) for line, run in runs.items() for value in run]
    return AnchorIndex(grouped[0], grouped[1], grouped[2], tuple(kept))


def _glossed(
    chosen: Sequence[Sequence[str]],
    meaning: Mapping[str, str],
    room: int,
    count: Callable[[str], int],
) -> tuple[dict[str, str], int]:
    """The lines of the chosen anchors, best-ranked first, within `room` tokens, and the room
    they leave; neighbours on one line share it (it is written once). A line that says no
    more than a label is left out: the label says it for less."""
    kept: dict[str, str] = {}
    for tier in chosen:
        previous = ""
        for value in tier:
            line = meaning.get(value, "")
            if line and not says_more(line, value):
                line = ""
            if line and line != previous:
                cost = count(GLOSS + line + "\n")
                if cost > room:
                    line = ""
                else:
                    room -= cost
            if line:
                kept[value] = line
            previous = line
    return kept, room


class _Queue:
    """One tier's candidates in order; what the view already holds is skipped lazily."""

    def __init__(
        self, values: Sequence[str], present: Callable[[str], bool], labels: Mapping[str, str]
    ) -> None:
        self.present = present
        self.labels = labels
        self.used: set[str] = set()  # labels this tier already writes
        self.left = list(values)

    def fill(self, chosen: list[str], allowance: int, count: Callable[[str], int]) -> int:
        """Move anchors to `chosen` in order where they fit `allowance`; returns tokens used.
        One that does not fit is passed over, not the end: the shorter ones after it still
        fit, and it stays for a later fill with more room."""
        used = 0
        skipped: list[str] = []
        for position, value in enumerate(self.left):
            if allowance - used < MIN_ANCHOR_COST:
                skipped += self.left[position:]
                break
            if self.present(value):
                continue
            said = self.labels.get(value) or kind(value)
            cost = count(value + SEPARATOR)
            if said not in self.used:
                cost += count(f"{GLOSS}{said}\n- tools: ")
            if used + cost > allowance:
                skipped.append(value)
                continue
            chosen.append(value)
            self.used.add(said)
            used += cost
        self.left = skipped
        return used


def render_anchors(index: AnchorIndex, header: str) -> str:
    """One line per anchor, or per run of anchors found on the same line, with that line."""
    lines = [header]
    glosses = index.glosses()
    for name, values in zip(TIERS, index.tiers(), strict=True):
        run: list[str] = []
        for position, value in enumerate(values):
            run.append(value)
            line = glosses.get(value, "")
            following = values[position + 1] if position + 1 < len(values) else None
            if following is not None and glosses.get(following, "") == line:
                continue
            if _is_label(line, run):
                lines.append(f"- {name}: {line}{KEY}{SEPARATOR.join(run)}")
            else:
                said = f"{GLOSS}{line}" if line else ""
                lines.append(f"- {name}: {SEPARATOR.join(run)}{said}")
            run = []
    lines += render_commands(index.commands)
    return "\n".join(lines)


def _is_label(line: str, run: Sequence[str]) -> bool:
    """Whether `line` is written before the names, as their key (`flight_number: HAT009,
    HAT013`): a short label that reads back unambiguously."""
    return (
        bool(line)
        and len(line) <= MAX_LABEL_CHARS
        and line == line.strip()
        and not any(mark in line for mark in (":", ",", GLOSS.strip(), "\n"))
        and not any(value in line for value in run)
    )


def parse_anchors(section: str) -> AnchorIndex:
    """The index written by `render_anchors` (the header line already removed)."""
    found: dict[str, list[str]] = {name: [] for name in TIERS}
    meaning: list[tuple[str, str]] = []
    commands: list[str] = []
    for line in section.splitlines():
        command = parse_command(line)
        if command is not None:
            commands.append(command)
            continue
        for name in TIERS:
            prefix = f"- {name}: "
            if not line.startswith(prefix):
                continue
            names, _, said = line[len(prefix) :].partition(GLOSS)
            if not said and KEY in names:  # `label: names` (a name never holds ": ")
                said, _, names = names.partition(KEY)
            values = [v for v in names.split(SEPARATOR) if v]
            found[name] += values
            meaning += [(v, said) for v in values if said]
    tiers = (tuple(found["user"]), tuple(found["agent"]), tuple(found["tools"]))
    return AnchorIndex(*tiers, meaning=tuple(meaning), commands=tuple(commands))
