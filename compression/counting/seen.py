"""Digests and token counts of the messages recent requests held, found again by the object.

A body parsed only as far as it grew or changed shares its other messages, as the very same
objects, with the body it came from, and nothing changes a parsed message in place (every
transform returns new values). A message object seen before therefore has the digest and the
counts it had: a dict probe, where hashing its canonical form costs about 2 µs and tokenizing
it about 25 µs per KB. A 200K-token history no session has seen, but that shares all but its
first messages with one served before (a subagent's, a restarted client's), is then digested
and counted for the price of its new messages.

Objects are held (strong references: an id is only unique while its object lives) within a
budget of their canonical bytes, least recently used first out. A message not found by identity
is hashed, and its count looked up by that digest in the counter's own cache (content-keyed:
the same text in a new object), then tokenized.

    seen = seen_messages()
    digests = seen.digests(messages)            # message_digests(messages)
    counts = seen.counts(counter, messages)     # known counts, None where not yet counted
    seen.remember(counter, messages, counts)    # after counting the rest
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from compression.counting.tokens import count_each
from compression.engine import TokenCounter
from compression.messages.digest import sized_digest
from compression.messages.types import Message, ToolSchema

# What the memo may hold, each entry charged its message's canonical bytes (the parsed message
# costs about as much, and is mostly shared with the bodies the proxy keeps to find grown ones
# in) plus ENTRY_BYTES for its own bookkeeping (the entry, its digest, its counts, its slot in
# the order: about 670 bytes measured): some 8M tokens of agent history, or 70,000 one-word
# messages. A message of an entry let go comes back as a new object, found by content instead.
BUDGET_BYTES = 64 * 1024 * 1024
ENTRY_BYTES = 700


class _Entry:
    __slots__ = ("counts", "digest", "message", "size")

    def __init__(self, message: Any, digest: str, size: int) -> None:
        self.message = message
        self.digest = digest
        self.size = size
        self.counts: dict[int, int] = {}  # id(counter) -> tokens (counters live for good)


class SeenMessages:
    """Messages recently digested or counted, by object identity; safe across threads."""

    def __init__(self, budget_bytes: int = BUDGET_BYTES) -> None:
        self.budget = budget_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hashed = 0  # messages hashed (the rest were found)
        # Counts are kept by id(counter): holding each counter keeps its id its own.
        self._counters: dict[int, TokenCounter] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _found(self, messages: Sequence[Message]) -> list[_Entry | None]:
        out: list[_Entry | None] = []
        entries = self._entries
        with self._lock:
            for message in messages:
                entry = entries.get(id(message))
                if entry is not None and entry.message is message:
                    entries.move_to_end(id(message))
                    out.append(entry)
                else:
                    out.append(None)
        return out

    def _entries_of(self, messages: Sequence[Message]) -> list[_Entry]:
        found = self._found(messages)
        new: list[_Entry] = []
        for i, entry in enumerate(found):
            if entry is None:
                digest, size = sized_digest(messages[i])
                entry = found[i] = _Entry(messages[i], digest, size + ENTRY_BYTES)
                new.append(entry)
        if new:
            self._keep(new)
        return [entry for entry in found if entry is not None]

    def _keep(self, new: list[_Entry]) -> None:
        entries = self._entries
        with self._lock:
            self.hashed += len(new)
            for entry in new:
                if entry.size > self.budget:
                    continue
                old = entries.pop(id(entry.message), None)
                if old is not None:
                    self._bytes -= old.size
                entries[id(entry.message)] = entry
                self._bytes += entry.size
            while self._bytes > self.budget and entries:
                self._bytes -= entries.popitem(last=False)[1].size

    def digests_unkept(
        self, messages: Sequence[Message], recent: dict[int, tuple[Any, str]] | None = None
    ) -> list[str]:
        """`digests(messages)`, keeping nothing here: for a list no later request is expected
        to share (a ledger link let go of past its budget), whose entries would only hold its
        messages and push out those of requests still coming. Entries are probed without the
        lock (a dict read is atomic; the identity check makes a reused id harmless) and left
        where they are in the order.

        `recent`, the caller's own small memo (id -> (message, digest)), is consulted too and
        then holds this list's messages only: consecutive lists of one agent's sessions share
        most of their message objects."""
        entries = self._entries
        out: list[str] = []
        hashed = 0
        for message in messages:
            entry = entries.get(id(message))
            if entry is not None and entry.message is message:
                out.append(entry.digest)
                continue
            known = recent.get(id(message)) if recent is not None else None
            if known is not None and known[0] is message:
                out.append(known[1])
            else:
                out.append(sized_digest(message)[0])
                hashed += 1
        if recent is not None:
            recent.clear()
            recent.update((id(m), (m, d)) for m, d in zip(messages, out, strict=True))
        if hashed:
            with self._lock:
                self.hashed += hashed
        return out

    def _key(self, counter: TokenCounter) -> int:
        key = id(counter)
        if key not in self._counters:
            with self._lock:
                self._counters[key] = counter
        return key

    def digests(self, messages: Sequence[Message]) -> list[str]:
        """`message_digests(messages)`, hashing only the objects not seen."""
        return [entry.digest for entry in self._entries_of(messages)]

    def counts(self, counter: TokenCounter, messages: Sequence[Message]) -> list[int | None]:
        """Each message's tokens by `counter` where known (this object, or its content in the
        counter's cache); None where it is still to be tokenized."""
        return self._counts_of(counter, self._entries_of(messages))

    def _counts_of(self, counter: TokenCounter, entries: list[_Entry]) -> list[int | None]:
        key = self._key(counter)
        out: list[int | None] = [entry.counts.get(key) for entry in entries]
        lookup = getattr(counter, "cached_counts", None)
        missing = [i for i, n in enumerate(out) if n is None]
        if missing and lookup is not None:
            for i, n in zip(missing, lookup([entries[i].digest for i in missing]), strict=True):
                if n is not None:
                    out[i] = entries[i].counts[key] = n
        return out

    def remember(
        self, counter: TokenCounter, messages: Sequence[Message], counts: Sequence[int]
    ) -> None:
        """Keep `counts` (each message's tokens by `counter`) with the messages, and in the
        counter's content-keyed cache."""
        entries = self._entries_of(messages)
        key = self._key(counter)
        fresh = []
        for entry, n in zip(entries, counts, strict=True):
            if key not in entry.counts:
                entry.counts[key] = n
                fresh.append((entry.digest, n))
        store = getattr(counter, "store_counts", None)
        if fresh and store is not None:
            store(fresh)

    def count_each(self, counter: TokenCounter, messages: Sequence[Message]) -> list[int]:
        """Each message's tokens by `counter`, tokenizing only those neither seen nor cached;
        each message hashed once, for this memo and the counter's cache alike."""
        entries = self._entries_of(messages)
        known = self._counts_of(counter, entries)
        missing = [i for i, n in enumerate(known) if n is None]
        if missing:
            digests = [entries[i].digest for i in missing]
            fresh = count_each(counter, [messages[i] for i in missing], digests)
            for i, n in zip(missing, fresh, strict=True):
                known[i] = n
        counts = [n or 0 for n in known]
        if missing:
            self.remember(counter, [messages[i] for i in missing], [counts[i] for i in missing])
        return counts

    def count_messages(
        self,
        counter: TokenCounter,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None = None,
    ) -> int:
        """`counter.count_messages(messages, tools)`, each message as `count_each` counts it."""
        return sum(self.count_each(counter, messages)) + counter.count_messages([], tools)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


_SHARED = SeenMessages()


def seen_messages() -> SeenMessages:
    """This process's shared memo (every counter and caller uses the same objects)."""
    return _SHARED
