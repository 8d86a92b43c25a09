"""Recall before asking: archived passages the newest turn names, put back in view.

Real models rarely call `ctxgate_recall` on their own. So before a request is forwarded, when
its newest turn (the user's message or a tool result, and the arguments of the model's call
it answers) names something the lineage's archive holds and the view does not, ctxgate puts
the best few passages back, each with its handle:

    1. for a question, the archived message where most of its words meet (at least
       `_STRONG` and half of its terms within `_NEAR` characters);
    2. exact identifiers (ids, paths, error names, config keys the turn names).

Each passage is the lines around what was named or asked. It goes after a user's words and
before a tool's output (whose end reports how the tool went), so only the tail of the request
changes and the provider's cached prefix holds. A placement stays where it was put on every
later request of the lineage until its next compression (a new checkpoint), so that prefix
keeps holding; a passage already placed, or whose text the view holds, is never put in twice.
All of a lineage's placements together are bounded by `ahead_share` of the window (names a
turn mentions in passing fill a third of it at most); only lineages with an archive are searched;
`ahead: false` turns it off. Placements live in this process: another worker does not see
them and leaves the tail as the client sent it.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from compression import (
    RECALLED_CLOSE,
    RECALLED_OPEN,
    Message,
    TokenCounter,
    content_text,
    find_anchors,
    handle,
    handoff_text,
    tool_calls_of,
)
from session.config.settings import RecallSettings
from session.turn import Turn
from storage import ArchivedMessage, EventRecord, SessionStore, StorageError, search_terms

log = logging.getLogger("ctxgate.recall")

OPEN, CLOSE = RECALLED_OPEN, RECALLED_CLOSE
_NAMES = 8  # names of the newest turn looked up, at most
_PASSAGES = 4  # passages placed for one turn, at most
_PASSAGE_CHARS = 280  # of an archived message, around what the turn names
_ANSWER_CHARS = 160  # of one, where a question's terms meet (the answer is a line or two)
_STRONG = 3  # distinct question terms a full-text hit must hold in one place
_NEAR = 200  # characters within which a question's terms must meet
_QUESTION_HITS = 8  # full-text hits of a question weighed by how many of its terms they hold
_RARE = 3  # a question's rarest terms searched alone
_LINEAGES = 2048  # lineages whose placements this process remembers


@dataclass(frozen=True, slots=True)
class Placement:
    """Text ctxgate added to one client message."""

    at: int  # the client message's position
    digest: str  # its chained digest, so an edited history drops the placement
    text: str
    handles: tuple[str, ...]
    tokens: int


def newest_names(messages: Sequence[Message]) -> list[str]:
    """What the newest turn names, in order: the newest message's own, then those of the
    model's call it answers."""
    if not messages or messages[-1].get("role") not in ("user", "tool"):
        return []
    texts = [content_text(messages[-1])]
    for message in reversed(messages[:-1]):
        if message.get("role") == "assistant":
            texts += [
                str(call.get("function", {}).get("arguments") or "")
                for call in tool_calls_of(message)
            ]
            break
    names: dict[str, None] = {}
    for text in texts:
        for name in find_anchors(text):
            names.setdefault(name, None)
    return list(names)[:_NAMES]


def question(messages: Sequence[Message]) -> str | None:
    """The newest message when it is the user asking something."""
    if not messages or messages[-1].get("role") != "user":
        return None
    text = content_text(messages[-1]).strip()
    return text if "?" in text and len(search_terms(text).distinct()) >= _STRONG else None


def strongest(hits: Sequence[ArchivedMessage], terms: Sequence[str]) -> ArchivedMessage | None:
    """The hit where the most distinct terms of the question meet within `_NEAR` characters
    (the search's order breaks ties), when at least `_STRONG` and half of the question's
    terms do: a message about the east gate shares "access code gate" with a question about
    the north gate, the right one holds "north" too; a long message holding the question's
    common words far apart ("could", "please", "flight") is not where its answer is."""
    needed = max(_STRONG, (len(terms) + 1) // 2)
    scored = [
        (densest_span(_searchable(hit).lower(), terms, _NEAR)[1], -n, hit)
        for n, hit in enumerate(hits)
    ]
    best = max(scored, key=lambda s: (s[0], s[1]), default=None)
    return best[2] if best is not None and best[0] >= needed else None


def rarer(hits: Sequence[ArchivedMessage], terms: Sequence[str]) -> list[str]:
    """A question's rarest terms, each to be searched alone: those that fewer than half of its
    search's hits hold, fewest first, `_RARE` at most. The search ranks only a lineage's
    newest matches, and a question's common words (`code`, `only`) match more newer messages
    than that; a rare word (`staging`) alone finds the answer however old. None of them when
    every term is as common as the rest."""
    texts = [_searchable(hit).lower() for hit in hits]
    held = {t: sum(t in text for text in texts) for t in terms}
    rare = sorted((t for t in terms if 2 * held[t] < len(texts)), key=lambda t: held[t])
    return rare[:_RARE] if texts and len(rare) < len(terms) else []


def _searchable(found: ArchivedMessage) -> str:
    """An archived message's text and its calls' arguments, as a passage quotes it."""
    message = cast(Message, found.message)
    calls = [str(c.get("function", {}).get("arguments") or "") for c in tool_calls_of(message)]
    return "\n".join(filter(None, [content_text(message), *calls]))


def passage(found: ArchivedMessage, about: str | Sequence[str]) -> str:
    """An archived message as placed: its handle and role, and its text around `about`: the
    lines around a name; for a question (its terms), the line that answers it, alone (its
    handle reads the rest)."""
    text = _searchable(found)
    lowered = text.lower()
    if isinstance(about, str):
        start, end = lines_around(text, max(0, lowered.find(about.lower())), _PASSAGE_CHARS)
    else:
        start, end = lines_around(text, answer_at(lowered, about), _ANSWER_CHARS, alone=True)
    lead, tail = ("…" if start else ""), ("…" if end < len(text) else "")
    role = str(cast(Message, found.message).get("role") or "?")
    return f"{handle(found.position)} ({role}): {lead}{text[start:end].strip()}{tail}"


def answer_at(text: str, terms: Sequence[str]) -> int:
    """Where a question's answer is in `text` (lower case): the line holding most of its
    distinct terms (the first such), or in a line too long to quote whole, where they are
    densest in it. A line that holds the subject and the label is the answer, not the
    line above it that holds one common word of the question."""
    best, at, start = 0, 0, 0
    for line in text.split("\n"):
        held = sum(term in line for term in terms)
        if held > best:
            best = held
            at = start if len(line) <= _ANSWER_CHARS else start + densest(line, terms, _NEAR)
        start += len(line) + 1
    return at


def lines_around(text: str, at: int, width: int, alone: bool = False) -> tuple[int, int]:
    """The span of whole lines around `at` that fits `width` characters (the line holding
    `at` first, then unless `alone` its neighbours, nearer first); a line longer than `width`
    is cut around `at`. Whole lines: a record or a sentence is not cut mid-way when it fits."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    end = len(text) if end < 0 else end
    if end - start > width:
        start = max(start, at - width // 3)
        return start, min(end, start + width)
    if alone:
        return start, end
    while True:
        before = text.rfind("\n", 0, max(0, start - 1)) + 1 if start > 0 else None
        after = text.find("\n", end + 1) if end < len(text) else None
        after = len(text) if after is not None and after < 0 else after
        if before is not None and end - before <= width:
            start = before
        elif after is not None and after - start <= width:
            end = after
        else:
            return start, end


def densest(text: str, terms: Iterable[str], width: int) -> int:
    """Where the most distinct query terms fall within `width` characters (the first such
    place): a word met alone early on (a path, a header) is not where the answer is."""
    return densest_span(text, terms, width)[0]


def densest_span(text: str, terms: Iterable[str], width: int) -> tuple[int, int]:
    """`densest`'s place and how many distinct terms fall there."""
    hits = sorted((m.start(), t) for t in terms for m in re.finditer(re.escape(t), text))
    counts: Counter[str] = Counter()
    best, at, low = 0, 0, 0
    for position, term in hits:  # a window sliding over the hits, one pass
        counts[term] += 1
        while hits[low][0] < position - width:
            gone = hits[low][1]
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
            low += 1
        if len(counts) > best:
            best, at = len(counts), hits[low][0]
    return at, best


class Foresight:
    """Places and keeps the passages of recall before asking, per lineage and checkpoint."""

    def __init__(
        self,
        store: SessionStore,
        settings: RecallSettings,
        counter: Callable[[Turn], TokenCounter],
    ) -> None:
        self.store = store
        self.settings = settings
        self.counter = counter
        self._placed: OrderedDict[str, tuple[int, list[Placement]]] = OrderedDict()

    def wanted(self, turn: Turn) -> bool:
        on = self.settings.enabled and self.settings.ahead
        return on and turn.checkpoint_id is not None and not turn.request.passthrough

    async def apply(self, turn: Turn) -> Turn:
        """The turn with its lineage's placements in view, and a new one for its newest turn
        when that names what the archive holds and the view does not."""
        if not self.wanted(turn) or not turn.view:
            return turn
        turn = turn.with_digests()
        digests = turn.digests or ()
        lineage = turn.checkpoint_key or turn.key.key
        checkpoint, placements = self._placed.get(lineage, (turn.checkpoint_id or 0, []))
        if checkpoint != turn.checkpoint_id:
            placements = []  # a compression since: the view starts over
        placements = [p for p in placements if p.at < len(digests) and digests[p.at] == p.digest]
        newest = len(turn.messages) - 1
        if newest >= 0 and not any(p.at == newest for p in placements):
            started = time.perf_counter()
            made = await self._place(turn, placements, newest, digests[newest])
            if made is not None:
                placements.append(made)
                await self._record(turn, made, time.perf_counter() - started)
        self._remember(lineage, turn.checkpoint_id or 0, placements)
        return _placed(turn, placements)

    def _remember(self, lineage: str, checkpoint: int, placements: list[Placement]) -> None:
        self._placed[lineage] = (checkpoint, placements)
        self._placed.move_to_end(lineage)
        while len(self._placed) > _LINEAGES:
            self._placed.popitem(last=False)

    async def _place(
        self, turn: Turn, placements: list[Placement], at: int, digest: str
    ) -> Placement | None:
        view = _placed(turn, placements).forwarded_view()
        shown = "\n".join(_texts(view))
        # What the view says of a name before the newest turn; a name the handoff only lists
        # (anchors, working set) is not what the archive says of it.
        older = view[: _turn_start(view)]
        told = "\n".join(_texts([m for m in older if handoff_text(m) is None]))
        placed = {h for p in placements for h in p.handles}
        # One share of the window for all the lineage's placements until its next compression:
        # each stays in every later request, so per-request shares would pile up. Names a turn
        # mentions in passing may fill a third of it; the rest is kept for what the user asks.
        share = int(turn.context_length * self.settings.ahead_share)
        spent = sum(p.tokens for p in placements)
        rooms = {True: share - spent, False: share // 3 - spent}  # asked -> room
        if rooms[True] <= 0:
            return None
        try:
            found = await self._found(turn, told, with_names=rooms[False] > 0)
        except StorageError as exc:
            log.warning("session %s: recall before asking could not search: %s", turn.key.key, exc)
            return None
        counter = self.counter(turn)
        kept: list[tuple[str, str]] = []
        used = counter.count_text(OPEN + CLOSE)
        for position, text, asked in found[:_PASSAGES]:
            name = handle(position)
            body = text.split(": ", 1)[-1].strip("…")
            if name in placed or body[:200] in shown:
                continue  # placed before, or the view holds it
            cost = counter.count_text(text) + 2
            if used + cost > rooms[asked]:
                continue  # a shorter one may still fit
            kept.append((name, text))
            used += cost
        if not kept:
            return None
        block = "\n".join([OPEN, *(text for _, text in kept), CLOSE])
        return Placement(at, digest, block, tuple(name for name, _ in kept), used)

    async def _found(self, turn: Turn, told: str, with_names: bool) -> list[tuple[int, str, bool]]:
        """(position, passage, whether it answers a question) of what the newest turn calls
        for, best first: the archived message a question's words match best, then each name
        the turn holds (when `with_names`) that the view before it does not tell of."""
        found: dict[int, tuple[int, str, bool]] = {}
        asked = question(turn.messages)
        names = [n for n in newest_names(turn.messages) if n not in told] if with_names else []
        queries = [(name, 2) for name in names]
        if asked is not None:
            queries.append((asked, _QUESTION_HITS))
        # One read for all of them: each read costs more than the search itself.
        results = await self.store.search_archive_each(turn.key, queries)
        if asked is not None:
            terms = search_terms(asked).distinct()
            hits = list(results[-1])
            rare = rarer(hits, terms)
            alone = [(word, _QUESTION_HITS // 2) for word in rare]
            for more in await self.store.search_archive_each(turn.key, alone):
                hits += more
            best = strongest(hits, terms)
            if best is not None:
                found[best.position] = (best.position, passage(best, terms), True)
        for name, hits in zip(names, results, strict=False):
            for hit in hits:
                if name in content_text(cast(Message, hit.message)) and hit.position not in found:
                    found[hit.position] = (hit.position, passage(hit, name), False)
                    break
        return list(found.values())

    async def _record(self, turn: Turn, made: Placement, seconds: float) -> None:
        event = EventRecord(
            sk=turn.key,
            trigger="recall-ahead",
            outcome="placed",
            tokens_before=0,
            tokens_after=made.tokens,
            messages_before=len(turn.view),
            messages_after=len(made.handles),  # the passages placed
            duration_ms=seconds * 1000,
        )
        try:
            await self.store.add_event(event)
        except StorageError as exc:
            log.warning("session %s: a recall-ahead event was not stored: %s", turn.key.key, exc)


def _placed(turn: Turn, placements: Sequence[Placement]) -> Turn:
    """The turn with each placement to be added to its client message when forwarded (the
    view the session keeps, compresses and measures stays the client's)."""
    if not placements:
        return turn
    view = turn.view
    placed: list[tuple[int, str]] = []
    tokens = 0  # of the placements in this request's view (a compression may have cut some)
    for placement in placements:
        index = turn.replacement_len + placement.at - turn.prefix_len
        if turn.replacement_len <= index < len(view) and view[index] is turn.messages[placement.at]:
            placed.append((index, placement.text))
            tokens += placement.tokens
    newest = [p for p in placements if p.at == len(turn.messages) - 1]
    return replace(
        turn,
        placed=tuple(placed),
        ahead=tuple(h for p in newest for h in p.handles),
        ahead_tokens=tokens,
    )


def _turn_start(view: Sequence[Message]) -> int:
    """Where the newest turn starts: the newest message, or the model's call a tool result
    answers."""
    start = len(view) - 1
    if start >= 0 and view[start].get("role") == "tool":
        while start > 0 and view[start].get("role") != "assistant":
            start -= 1
    return max(0, start)


def _texts(view: Sequence[Message]) -> list[str]:
    texts = [content_text(m) for m in view]
    texts += [
        str(c.get("function", {}).get("arguments") or "") for m in view for c in tool_calls_of(m)
    ]
    return texts
