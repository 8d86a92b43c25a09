"""Anchors: short exact tokens from the compacted turns, kept verbatim in the handoff.

A summary paraphrases; an agent that continues the work needs the exact record ids, paths,
error names and URLs it saw (a reservation id from a lookup, the path a search found, the
exception a test raised). The handoff keeps an index of them, in three tiers that say where
each was seen, newest first:

    ## Anchors (exact ids, paths and names from the compacted turns, newest first)
    - user: mia_li_3668, NEEDLE-0a1b2c3d4e
    - agent: HAT136, credit_card_4421486
    - tools: /repo/src/app.py, ZeroDivisionError, 4f2a9c1

`user` = written by the user; `agent` = used in the assistant's text or tool-call arguments
(what the conversation acted on); `tools` = only seen in tool output. Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

TIERS = ("user", "agent", "tools")
TIER_SHARES = (0.4, 0.3, 0.3)  # of the anchor budget, before leftovers flow down the tiers
SEPARATOR = ", "
MAX_ANCHOR_CHARS = 120
SCAN_HEAD_CHARS = 4000  # of a long text: ids sit at the start of records and outputs,
SCAN_TAIL_CHARS = 1500  # outcomes and final values at the end
SCAN_CHARS_PER_TIER = 30_000  # newest first; bounds the work on huge regions (~2 ms a tier)

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

    def tiers(self) -> tuple[tuple[str, ...], ...]:
        return (self.user, self.agent, self.tools)

    def __bool__(self) -> bool:
        return bool(self.user or self.agent or self.tools)


def find_anchors(text: str) -> tuple[str, ...]:
    """Distinct anchors of `text` in order of appearance (long texts: head and tail only)."""
    if len(text) > SCAN_HEAD_CHARS + SCAN_TAIL_CHARS:
        text = text[:SCAN_HEAD_CHARS] + "\n" + text[-SCAN_TAIL_CHARS:]
    return _find(text)


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

    def scan(self, tier: int, text: str) -> None:
        """Add the anchors found in `text`, if the tier still wants more."""
        if text and self.wants(tier):
            self._scanned[tier] += min(len(text), SCAN_HEAD_CHARS + SCAN_TAIL_CHARS)
            self.add(tier, find_anchors(text))

    def add(self, tier: int, values: Iterable[str]) -> None:
        bucket = self._tiers[tier]
        for value in values:
            known = self._tier.get(value)
            if known is not None and known <= tier:
                continue
            if known is not None:
                del self._tiers[known][value]
            self._tier[value] = tier
            bucket[value] = None

    def wants(self, tier: int) -> bool:
        return len(self._tiers[tier]) < self.per_tier and self._scanned[tier] < SCAN_CHARS_PER_TIER

    def done(self) -> bool:
        return not any(self.wants(tier) for tier in range(len(TIERS)))

    def candidates(self) -> tuple[list[str], ...]:
        return tuple(list(bucket) for bucket in self._tiers)


def select_anchors(
    tiers: Sequence[Sequence[str]],
    budget: int,
    count: Callable[[str], int],
    present: Callable[[str], bool],
) -> AnchorIndex:
    """Anchors within `budget` tokens, skipping what the view already holds verbatim.

    Each tier first gets its share of the budget; what a tier leaves unused goes to the
    others in tier order, so a session without user-stated ids spends it on tool ids.
    """
    chosen: list[list[str]] = [[] for _ in TIERS]
    if budget <= 0:
        return AnchorIndex()
    queues = [_Queue(tier, present) for tier in tiers]
    left = budget
    for position, share in enumerate(TIER_SHARES):
        left -= queues[position].fill(chosen[position], int(budget * share), count)
    for position in range(len(TIERS)):
        left -= queues[position].fill(chosen[position], left, count)
    return AnchorIndex(*(tuple(values) for values in chosen))


class _Queue:
    """One tier's candidates in order; what the view already holds is skipped lazily."""

    def __init__(self, values: Sequence[str], present: Callable[[str], bool]) -> None:
        self.values = values
        self.present = present
        self.next = 0

    def fill(self, chosen: list[str], allowance: int, count: Callable[[str], int]) -> int:
        """Move anchors to `chosen` in order while they fit `allowance`; returns tokens used."""
        used = 0
        while self.next < len(self.values):
            value = self.values[self.next]
            if self.present(value):
                self.next += 1
                continue
            cost = count(value + SEPARATOR)
            if used + cost > allowance:
                break
            chosen.append(value)
            used += cost
            self.next += 1
        return used


def render_anchors(index: AnchorIndex, header: str) -> str:
    lines = [header]
    for name, values in zip(TIERS, index.tiers(), strict=True):
        if values:
            lines.append(f"- {name}: {SEPARATOR.join(values)}")
    return "\n".join(lines)


def parse_anchors(section: str) -> AnchorIndex:
    """The index written by `render_anchors` (the header line already removed)."""
    found: dict[str, tuple[str, ...]] = {}
    for line in section.splitlines():
        for name in TIERS:
            prefix = f"- {name}: "
            if line.startswith(prefix):
                found[name] = tuple(v for v in line[len(prefix) :].split(SEPARATOR) if v)
    return AnchorIndex(found.get("user", ()), found.get("agent", ()), found.get("tools", ()))
