"""Parsing a request whose conversation only grew, without parsing all of it again.

An agent sends its whole history with every request: the bytes of its previous request with
new messages put in before the messages array closes (or the same bytes again, on a retry).
Parsing 64K tokens of JSON, checking every message and freeing it all again is most of what
ctxgate costs above a bare relay at that size, and the Messages and Responses doors also
convert every message (item) to the chat shape the core works on. This keeps the last parsed
bodies (within `server.parsed_request_bytes`); a body that is one of them grown is built from
it, and only what was added is parsed.

Exactness: a body is kept only when orjson writes its parse back as exactly the bytes that came
(what compact JSON writers send: the OpenAI and Anthropic SDKs, Codex, Claude Code), so where
its messages array ends is known (a check of the bytes around the array's end alone would not
do: a repeated key after the array can hold a `]` that looks like its end). A new body counts
as grown only when it is byte for byte the kept bytes with `,` and new messages at that offset,
and orjson writes those messages back as exactly the inserted bytes: the result equals a full
parse. Kept parsed values are shared with
later requests, so nothing may change a parsed request in place (no message transform in
ctxgate does; each returns new values); so are what doors keep with them (`derived`).

A body may also be a kept one **edited**: a run of its entries replaced or taken out, everything
before and after them byte for byte the same (a client that rewrites an early message, or
clears old tool results in place; and every first request of a conversation that shares all
but a few messages with one kept: a subagent's, a restarted client's). Only the replacing
entries are parsed, under the same write-back check. Doors that extend a conversion of the
kept entries (`derived`) ask for grown bodies only.

A `mark` given at construction is counted in every kept body once (unless the caller counted
what it stands for, say image parts, as it checked the body), and in a grown body only where it
is new: never fewer than what it stands for, never more than a byte scan of the whole body
would find, without the scan.

Keeping is deferred until whoever serves the request calls `settle`, once the client has its
answer: finding where a body's array ends, counting its marks and freeing the bodies it pushes
out of the budget then cost the client nothing. Not on the event loop's next turn: the loop
writes a large body upstream as the socket drains, and a keep run in between holds it up.
`find` settles whatever is still pending first, so a body is found the same
either way; past `MOST_PENDING` keeps, or with no event loop, they are done at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from proxy.doors.bodies import JsonObject
from proxy.doors.layout import frame_of, laid_entries

log = logging.getLogger("ctxgate.doors")

BUDGET_BYTES = 16 * 1024 * 1024  # raw bytes of the bodies kept; parsed they take ~3x that
# Below this a full parse costs less than keeping the body. An 8K-token agent history is 20-35
# KB: kept, its turns are parsed alone and its earlier messages stay the same objects, whose
# digests are then not computed again (session.compaction.DigestMemo).
SMALLEST_BYTES = 8 * 1024
KEY_BYTES = 512  # conversations are told apart by their opening bytes...
PER_KEY = 4  # ...and several may share an opening (one agent, one system prompt)
FOREIGN_KEYS = 4096
FOREIGN_SKIPS = 16  # bodies of an opening another writer wrote, left alone before a retry
# Up to this a kept body's entries are written back when a body of its opening is looked for;
# a larger one's as it is kept, after its answer, rather than in the way of the next request.
LAID_LATER_BYTES = 64 * 1024
MOST_PENDING = 64  # keeps waiting for `settle`; more (answers that never came) are done now


@dataclass(frozen=True, slots=True)
class _Kept:
    raw: bytes
    body: JsonObject
    end: int  # offset in `raw` just past the array's last entry
    derived: Any  # what the door made of the body (a conversion it can extend), if anything
    marks: int | None  # how often the mark occurs in `raw` (None: no mark counted)
    starts: tuple[int, ...] = ()  # offset of each entry in `raw` (none: not worked out)


@dataclass(frozen=True, slots=True)
class _Unlaid:
    """A body kept before its layout is worked out: that is done when a body of its opening
    is looked for, since most bodies are never grown nor edited (a subagent's one request,
    the last of a conversation) and writing every entry back costs ~2 µs each. Only bodies up
    to `LAID_LATER_BYTES`: a larger one's would hold up the request that looks for it."""

    raw: bytes
    body: JsonObject
    derived: Any
    marks: int | None
    start: int  # where the array's entries start in `raw`, and where they end
    end: int


@dataclass(frozen=True, slots=True)
class Grown:
    body: JsonObject
    known: int  # how many leading entries of the array were in the kept body (checked then)
    end: int
    source: _Kept
    marks: int | None  # how often the mark occurs in the grown body's bytes
    tail: int = 0  # how many trailing entries are the kept body's (checked then): an edit's
    # The offset of each entry in the body's bytes (none when unknown), worked out when kept.
    starts: Callable[[], tuple[int, ...]] = tuple

    @property
    def derived(self) -> Any:
        """What the door made of the body this one grew out of."""
        return self.source.derived


class GrownBodies:
    """The last parsed bodies of one API, found again by the bodies that grew out of them."""

    def __init__(
        self,
        array: str,
        budget_bytes: int = BUDGET_BYTES,
        smallest_bytes: int = SMALLEST_BYTES,
        mark: bytes | None = None,
    ) -> None:
        self.array = array
        self.mark = mark
        self._budget = budget_bytes
        self._smallest = smallest_bytes
        self._kept: OrderedDict[bytes, list[_Kept | _Unlaid]] = OrderedDict()
        # Openings of bodies another writer wrote (orjson writes them back differently), with
        # how many more of their bodies to leave alone: one odd body (a float written as 1e5,
        # say) must not bar its opening for good.
        self._foreign: OrderedDict[bytes, int] = OrderedDict()
        self._bytes = 0
        # Parses run on the event loop; the lock only matters for the rare parse from a
        # worker thread (offline tools, tests serving several loops from one process).
        self._lock = threading.Lock()
        self._pending: list[Callable[[], None]] = []  # keeps not yet done

    def find(self, raw: bytes, edits: bool = False) -> Grown | None:
        """`raw` parsed from a kept body it grew out of (with `edits`, or one it is an edit
        of), or None (parse it whole)."""
        if len(raw) < self._smallest:
            return None
        self.settle()
        key = raw[:KEY_BYTES]
        with self._lock:
            found = list(self._kept.get(key, ()))
        candidates = self._laid_out(key, found)
        for kept in candidates:
            grown = _grow(kept, raw, self.array)
            if grown is not None:
                body, end, starts = grown
                marks = kept.marks
                if marks is not None and self.mark is not None and end > kept.end:
                    marks += raw.count(self.mark, kept.end, end)
                return Grown(body, len(kept.body[self.array]), end, kept, marks, 0, starts)
        # An edit of the newest body of that opening only: the run found is parsed, and
        # where it fails a write-back check, every other body's would fail it too.
        if edits and candidates:
            return _edit(candidates[0], raw, self.array)
        return None

    def keep(
        self, raw: bytes, body: JsonObject, derived: Any = None, marks: int | None = None
    ) -> None:
        """Keep a fully parsed and checked body for the requests that will grow out of it.

        `marks`, when the caller counted what the mark stands for as it checked the body
        (never fewer than there are), is kept instead of a scan of `raw` for the mark."""
        entries = body.get(self.array)
        if len(raw) < self._smallest or not isinstance(entries, list) or not entries:
            return
        self._later(partial(self._keep, raw, body, derived, marks))

    def keep_grown(
        self, raw: bytes, grown: Grown, derived: Any = None, marks: int | None = None
    ) -> None:
        """Keep a grown body, once its added entries passed their checks, in place of the
        body it grew out of (the conversation has moved on); an edited one beside it (it may
        be another conversation's first request). `marks`: the caller's count, when it
        counted what the mark stands for, in place of the grown body's."""
        edited = grown.known < len(grown.source.body[self.array])
        replacing = None if edited else grown.source
        self._later(partial(self._keep_grown, raw, grown, derived, replacing, marks))

    def settle(self) -> None:
        """Do the keeps still pending."""
        while self._pending:
            with self._lock:
                pending, self._pending = self._pending, []
            for keep in pending:
                try:
                    keep()
                except Exception:  # a body not kept is parsed whole next time: no harm
                    log.exception("keeping a parsed request body failed")

    def _later(self, keep: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(keep)
            waiting = len(self._pending)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop here (offline tools): now
            self.settle()
            return
        if waiting == MOST_PENDING:
            loop.call_soon(self.settle)

    def _keep(self, raw: bytes, body: JsonObject, derived: Any, marks: int | None) -> None:
        key = raw[:KEY_BYTES]
        with self._lock:
            skips = self._foreign.pop(key, 0)
            if skips:
                self._foreign[key] = skips - 1
                return
        frame = frame_of(raw, body, self.array)
        if frame is None:
            self._foreign_opening(key)
        elif frame[1] >= KEY_BYTES:  # else the opening holds bytes that will change
            unlaid = _Unlaid(raw, body, derived, marks, *frame)
            kept = unlaid if len(raw) <= LAID_LATER_BYTES else self._lay_out(key, unlaid)
            if kept is not None:
                self._store(key, kept, replacing=None)

    def _foreign_opening(self, key: bytes) -> None:
        with self._lock:
            self._foreign[key] = FOREIGN_SKIPS
            if len(self._foreign) > FOREIGN_KEYS:
                self._foreign.popitem(last=False)

    def _laid_out(self, key: bytes, found: list[_Kept | _Unlaid]) -> list[_Kept]:
        """`found` (the bodies kept under `key`) with their layouts worked out; those whose
        layout cannot be are let go (and the opening left alone a while where another writer
        wrote the body)."""
        if all(isinstance(kept, _Kept) for kept in found):
            return [kept for kept in found if isinstance(kept, _Kept)]
        laid: dict[int, _Kept | None] = {}
        for kept in found:
            if isinstance(kept, _Unlaid):
                laid[id(kept)] = self._lay_out(key, kept)
        with self._lock:
            entries = self._kept.get(key)
            if entries is not None:
                now = [laid.get(id(e), e) if isinstance(e, _Unlaid) else e for e in entries]
                self._kept[key] = [e for e in now if e is not None]
                gone = [e for e, n in zip(entries, now, strict=True) if n is None]
                self._bytes -= sum(len(e.raw) for e in gone)
                if not self._kept[key]:
                    del self._kept[key]
        out = [laid.get(id(e)) if isinstance(e, _Unlaid) else e for e in found]
        return [kept for kept in out if kept is not None]

    def _lay_out(self, key: bytes, kept: _Unlaid) -> _Kept | None:
        raw, marks = kept.raw, kept.marks
        layout = laid_entries(raw, kept.body, self.array, kept.start, kept.end)
        if layout is None:
            self._foreign_opening(key)
            return None
        if self.mark is None:
            marks = None
        elif marks is None:
            marks = raw.count(self.mark)
        end, starts = layout
        return _Kept(raw, kept.body, end, kept.derived, marks, starts)

    def _keep_grown(
        self, raw: bytes, grown: Grown, derived: Any, replacing: _Kept | None, marks: int | None
    ) -> None:
        if grown.end < KEY_BYTES:  # edited down: the opening holds bytes that will change
            return
        if self.mark is None:
            marks = None
        elif marks is None:
            marks = grown.marks
        kept = _Kept(raw, grown.body, grown.end, derived, marks, grown.starts())
        self._store(raw[:KEY_BYTES], kept, replacing)

    def _store(self, key: bytes, kept: _Kept | _Unlaid, replacing: _Kept | None) -> None:
        with self._lock:
            before = self._kept.pop(key, [])
            entries = [kept, *(e for e in before if e is not replacing)][:PER_KEY]
            self._bytes += sum(len(e.raw) for e in entries) - sum(len(e.raw) for e in before)
            self._kept[key] = entries
            while self._bytes > self._budget and self._kept:
                _, oldest = self._kept.popitem(last=False)
                self._bytes -= sum(len(e.raw) for e in oldest)


def _grow(
    kept: _Kept, raw: bytes, array: str
) -> tuple[JsonObject, int, Callable[[], tuple[int, ...]]] | None:
    """`raw` parsed, when it is `kept.raw` with entries added to the array; its end, and
    its entries' offsets (when the kept body's are known)."""
    before, end = kept.raw, kept.end
    tail = len(before) - end
    if len(raw) < len(before) or not raw.startswith(memoryview(before)[:end]):
        return None
    if not raw.endswith(memoryview(before)[end:]):
        return None
    added = raw[end : len(raw) - tail]
    entries: list[Any] = kept.body[array]
    if not added:
        return {**kept.body, array: [*entries]}, end, partial(tuple, kept.starts)
    if added[:1] != b",":
        return None
    new = _entries(b"[" + added[1:] + b"]")
    if new is None:
        return None
    starts = partial(_spliced, kept.starts, len(entries), len(entries), 0, new, end + 1)
    return {**kept.body, array: [*entries, *new]}, end + len(added), starts


def _edit(kept: _Kept, raw: bytes, array: str) -> Grown | None:
    """`raw` parsed, when it is `kept.raw` with a run of the array's entries replaced by
    others, or taken out, the bytes before and after the run unchanged. Its marks are not
    counted: a door that asks for edits counts what the mark stands for as it checks."""
    before, starts, entries = kept.raw, kept.starts, kept.body[array]
    count = len(entries)
    if not starts or not raw.startswith(memoryview(before)[: starts[0]]):
        return None
    bounds = (*starts, kept.end)  # where each entry starts, then the array's end
    first = _first_changed(raw, before, bounds)
    if first == count:
        return None  # nothing before the array's end differs: grown, or something else
    after = _first_kept_after(raw, before, bounds, first)
    if after is None:
        return None
    shift = len(raw) - len(before)
    new = _run(raw[bounds[first] : bounds[after] + shift], first, after, count)
    if new is None:
        return None
    offsets = partial(_spliced, starts, first, after, shift, new, bounds[first])
    body = {**kept.body, array: [*entries[:first], *new, *entries[after:]]}
    return Grown(body, first, kept.end + shift, kept, None, count - after, offsets)


def _spliced(
    starts: tuple[int, ...], first: int, after: int, shift: int, new: list[Any], at: int
) -> tuple[int, ...]:
    """The entries' offsets once those from `first` to `after` are replaced by `new`,
    written from `at` on, the bytes from `after` on moved by `shift` (none when unknown)."""
    if not starts:
        return ()
    return (*starts[:first], *_starts(new, at), *(s + shift for s in starts[after:]))


def _first_changed(raw: bytes, before: bytes, bounds: tuple[int, ...]) -> int:
    """The last boundary up to which `raw` is `before` (the first entry changed)."""
    same = memoryview(before)
    lo, hi = 0, len(bounds) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if raw.startswith(same[: bounds[mid]]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_kept_after(raw: bytes, before: bytes, bounds: tuple[int, ...], first: int) -> int | None:
    """The least entry from which on (the array's end: len(bounds) - 1) `before` ends `raw`
    without reaching into the prefix up to `first`; None when even the end does not."""
    same, shift, count = memoryview(before), len(raw) - len(before), len(bounds) - 1

    def kept_after(at: int) -> bool:
        return bounds[at] + shift >= bounds[first] and raw.endswith(same[bounds[at] :])

    # Most edits replace one entry or put one in; a look at a longer suffix compares more.
    if kept_after(first):
        return first
    if first < count and kept_after(first + 1):
        return first + 1
    lo, hi = first + 2, count
    if lo > hi or not kept_after(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if kept_after(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _run(replacing: bytes, first: int, after: int, count: int) -> list[Any] | None:
    """The entries that `replacing` (what stands where entries first..after-1 stood, with
    the comma before the entry kept after it) holds; None when it is no such run."""
    if after < count and replacing:
        if replacing[-1:] != b"," or replacing == b",":  # a comma alone: `,,` or `[,`
            return None
        replacing = replacing[:-1]
    if replacing:
        return _entries(b"[" + replacing + b"]")
    # Entries taken out, nothing in their place (at the array's end only all of them: the
    # comma before the first would be left).
    return [] if after < count or first == 0 else None


def _entries(text: bytes) -> list[Any] | None:
    """The entries of the JSON array `text`, when orjson writes them back as exactly `text`."""
    try:
        new = orjson.loads(text)
        if not isinstance(new, list) or not new or orjson.dumps(new) != text:
            return None
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    return new


def _starts(entries: list[Any], at: int) -> tuple[int, ...]:
    """Where each of `entries` starts in compact JSON, the first at `at`: orjson writes each
    entry alone as inside the array, `,` between them."""
    try:
        sizes = [len(orjson.dumps(e)) for e in entries]
    except orjson.JSONEncodeError:
        return ()
    starts = []
    for size in sizes:
        starts.append(at)
        at += size + 1
    return tuple(starts)
