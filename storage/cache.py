"""Recently read session rows, kept in this process so the request path needs no round trip.

Rows this process writes stay current here: usage is applied the way the database applies it,
every other write drops the entry so the next read goes to the database. Usage still lingering
in the write-behind is applied to such a read too (`Unwritten`): without it, the row read back
after a drop would miss the session's last answers until the batch is written, and the next
request would be measured without its anchor, differently as the timing falls. Rows another replica
writes are seen at most `ttl_s` late. On SQLite a copy past that age is renewed when no other
connection committed since the last look (the store asks SQLite's data version): one look
vouches for every copy at once, so a burst of lookups asks once. All copies are cleared when
one did. That is safe because nothing decisive rests on this copy:
compressions re-read checkpoints from the database under the session lease, so a stale row
costs at most one checkpoint lookup or one redundant compression check.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from storage.records import SessionKey, SessionRecord, UsageRecord, evolved


class Miss:
    """Returned by SessionCache.get when the cache cannot answer (None is an answer)."""


MISS: Final = Miss()


class SessionCache:
    def __init__(
        self,
        ttl_s: float,
        *,
        max_entries: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._rows: OrderedDict[SessionKey, tuple[float, SessionRecord | None]] = OrderedDict()
        self._vouched_at = -math.inf  # when every copy was last known current
        self.epoch = 0
        """Bumped by every drop: a row read from the database before a drop may predate the
        write that caused it, so `put` refuses rows read in an earlier epoch."""

    def get(self, sk: SessionKey) -> SessionRecord | None | Miss:
        """The cached row (None: known not to exist) or MISS when absent or expired."""
        entry = self._rows.get(sk)
        if entry is None or self._clock() - max(entry[0], self._vouched_at) > self.ttl_s:
            return MISS
        return entry[1]

    def holds(self, sk: SessionKey) -> bool:
        """Whether a copy of `sk`'s row (fresh or not) is kept: a vouch can only renew one."""
        return sk in self._rows

    def vouch(self) -> None:
        """Every copy is what the database holds now (its caller checked): each is fresh
        again for `ttl_s` from now."""
        self._vouched_at = self._clock()

    def put(self, sk: SessionKey, record: SessionRecord | None, read_in_epoch: int) -> None:
        if self.ttl_s <= 0 or read_in_epoch != self.epoch:
            return
        self._rows[sk] = (self._clock(), record)
        self._rows.move_to_end(sk)
        while len(self._rows) > self._max:
            self._rows.popitem(last=False)

    def clear(self) -> None:
        self.epoch += 1
        self._rows.clear()

    def drop(self, sk: SessionKey) -> None:
        self.epoch += 1
        self._rows.pop(sk, None)

    def apply_usage(self, u: UsageRecord) -> None:
        """Mirror of the database's usage upsert on the cached row (freshness unchanged)."""
        entry = self._rows.get(u.sk)
        if entry is None or u.at is None:
            return
        fetched, old = entry
        self._rows[u.sk] = (fetched, with_usage(old, u))


def with_usage(old: SessionRecord | None, u: UsageRecord) -> SessionRecord:
    """The session row after `u` is written, as storage.rows.usage computes it in SQL."""
    at = u.at if u.at is not None else 0.0
    if old is None:
        old = SessionRecord(
            scope=u.sk.scope,
            key=u.sk.key,
            model=u.model,
            created_at=at,
            updated_at=at,
            last_prompt_tokens=None,
            last_completion_tokens=None,
            last_message_count=None,
            last_usage_estimated=False,
            last_usage_at=None,
            request_count=0,
            compression_count=0,
            total_prompt_tokens=0,
            total_completion_tokens=0,
            engine_state={},
            parent_key=None,
            child_key=None,
            last_compression_at=None,
            root_key=u.sk.key,
        )
    # One copy (it costs more than the arithmetic: it runs on every request).
    return evolved(
        old,
        model=u.model,
        updated_at=max(old.updated_at, at),
        request_count=old.request_count + 1,
        total_prompt_tokens=old.total_prompt_tokens + u.prompt_tokens,
        total_completion_tokens=old.total_completion_tokens + u.completion_tokens,
        **_latest(old, u, at),
    )


def with_latest(old: SessionRecord, u: UsageRecord) -> SessionRecord:
    """`old` with the newest-usage fields `u` sets, its totals untouched: applying it again,
    or to a row that already counts `u`, changes nothing."""
    latest = _latest(old, u, u.at if u.at is not None else 0.0)
    return evolved(old, **latest) if latest else old


def _latest(old: SessionRecord, u: UsageRecord, at: float) -> dict[str, Any]:
    """The fields `u` sets as the session's newest usage: none when the row holds a newer
    usage or compression (a compression marks the real figure pending)."""
    newer = at >= (old.last_usage_at if old.last_usage_at is not None else at) and at >= (
        old.last_compression_at if old.last_compression_at is not None else at
    )
    if not newer:
        return {}
    latest: dict[str, Any] = {
        "last_prompt_tokens": u.prompt_tokens,
        "last_completion_tokens": u.completion_tokens,
        "last_message_count": u.message_count,
        "last_usage_estimated": u.estimated,
        "last_usage_at": at,
    }
    if u.tip_digest is not None:
        latest |= {"tip_len": u.tip_len, "tip_digest": u.tip_digest}
    return latest


class Unwritten:
    """Usage records handed to the write-behind and not yet written, by session: a row read
    from the database while they linger shows their figures, so that a copy dropped by
    another write does not read back without this process's last answer (the next request
    is measured from it).

    A read while no batch was being written cannot hold any of them: the row plus all of
    them (`applied`) is what the database will hold, as a cached copy is, and is kept. A
    read that a batch's write overlapped may hold some: it shows their newest figures only
    (`over`) and is not kept."""

    def __init__(self) -> None:
        self._records: dict[SessionKey, list[UsageRecord]] = {}
        self._writing = 0  # batches being written now
        self._started = 0  # batches whose write has started, ever

    def add(self, u: UsageRecord) -> None:
        self._records.setdefault(u.sk, []).append(u)

    def writing(self) -> None:
        """A batch's write starts (`done` ends it)."""
        self._writing += 1
        self._started += 1

    def done(self, batch: list[UsageRecord]) -> None:
        """The batch was written, or given up on: the database answers for it from now."""
        self._writing -= 1
        for u in batch:
            held = self._records.get(u.sk)
            if held is None:
                continue
            held[:] = [h for h in held if h is not u]
            if not held:
                del self._records[u.sk]

    def of(self, sk: SessionKey) -> list[UsageRecord]:
        return list(self._records.get(sk, ()))

    def quiet(self) -> int | None:
        """Before a read: a token for `none_written_since`, or None while a batch is being
        written."""
        return None if self._writing else self._started

    def none_written_since(self, token: int | None) -> bool:
        """After a read: no batch was being written at any time since `quiet` gave `token`,
        so no record held now can be in the row read."""
        return token is not None and not self._writing and self._started == token

    def applied(self, record: SessionRecord | None, sk: SessionKey) -> SessionRecord | None:
        """`record`, which holds none of the session's records held here, with all of them
        applied as the database will apply them, totals included."""
        for u in self._records.get(sk, ()):
            record = with_usage(record, u)
        return record

    def over(
        self, record: SessionRecord | None, sk: SessionKey, earlier: list[UsageRecord]
    ) -> SessionRecord | None:
        """`record` as read from the database with the newest figures of the records still
        held, or held when the read began (`earlier`: some may be in the row by now). Only
        the newest-usage fields are set, never the totals: the row may already count a
        record written during the read, and setting them again changes nothing. (A session
        with no row yet gets the records' totals too: none of them can be in it.)"""
        pending = {id(u): u for u in [*earlier, *self.of(sk)]}
        for u in sorted(pending.values(), key=lambda u: u.at or 0.0):
            record = with_usage(record, u) if record is None else with_latest(record, u)
        return record
