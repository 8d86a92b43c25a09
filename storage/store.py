"""SessionStore: the one object the proxy talks to about persistent session state.

Every public coroutine either succeeds or raises StorageError; record_usage_later never
raises. Values in and out are the frozen dataclasses of storage.records. A call cancelled
while its transaction runs lets the transaction finish (so it may have committed) and then
re-raises the cancellation: a compression that cost a summary call is not thrown away, and
no connection is left holding SQLite's write lock.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from storage.accounts import Accounts
from storage.cache import Miss, SessionCache, Unwritten
from storage.database import migrations
from storage.database.db import Database
from storage.database.inline import Executor
from storage.errors import StorageError
from storage.journal import Mark
from storage.records import (
    UNSET,
    ArchivedMessage,
    ArchiveFacts,
    Checkpoint,
    CompressionCommit,
    EventRecord,
    Fork,
    JSONObject,
    SessionDetail,
    SessionKey,
    SessionOrder,
    SessionRecord,
    StoreStats,
    Unset,
    UsageRecord,
)
from storage.replay import open_journal, replay_journals
from storage.rows import checkpoints, events, lineages, marks, search, sessions, usage, windows
from storage.rows.charges import ChargeRow
from storage.tenancy import Tenancy
from storage.writer import UsageWriter

logger = logging.getLogger("ctxgate.storage")

INLINE_USAGE_RECORDS = 64  # larger batches go through the pool's thread

Clock = Callable[[], float]


class SessionStore(Accounts, Tenancy):
    """Sessions, checkpoints, archive, events, usage and model windows; charges and switches
    (storage.accounts) and leases (storage.tenancy) are parts of it."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        cache: SessionCache,
        journal_dir: Path | None = None,
        linger_s: float = 0.5,
    ) -> None:
        """Use `await SessionStore.open(url)`; this only wires the parts together."""
        self._db = db
        self._clock = clock
        self._cache = cache
        self._unwritten = Unwritten()
        journal = open_journal(journal_dir, "usage")
        self._writer: UsageWriter[UsageRecord] = UsageWriter(
            self._write_usage, journal=journal, linger_s=linger_s
        )
        journal = open_journal(journal_dir, "charge")
        self._charges: UsageWriter[ChargeRow] = UsageWriter(
            self._write_charges, what="charge", journal=journal, linger_s=linger_s
        )
        self._closed = False
        self._checkpoints = checkpoints.KeptCheckpoints()  # parsed once, found again by id
        self._session_reads = 0
        self._version_checks = 0

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock = time.time,
        session_cache_s: float = 0.0,
        journal_dir: Path | None = None,
        linger_s: float = 0.5,
    ) -> SessionStore:
        """Connect, create or migrate the schema, start the usage writer.

        url: "sqlite+aiosqlite:///path.db" (parent directories are created) or
        "postgresql+asyncpg://user@host/db". clock: epoch seconds (injectable for tests).
        session_cache_s: how long get_session may answer from this process's copy of a row
        (0: every call reads the database); see storage.cache.
        journal_dir: where usage and charges are journaled as they are handed over, so that a
        crash loses none of them (storage.journal); the journals of dead processes found there
        are replayed first. None: no journal (storage.replay.journal_directory(url) is the
        usual place).
        linger_s: how long the write-behind gathers records into one transaction.
        """
        db = Database.connect(url)
        try:
            await db.prepare()
            await db.write(lambda conn: migrations.ensure_schema(conn, clock()))
            if journal_dir is not None:
                try:
                    await replay_journals(db, journal_dir, clock)
                except OSError as exc:
                    logger.error("accounting journals in %s not replayed: %s", journal_dir, exc)
            store = cls(db, clock, SessionCache(session_cache_s), journal_dir, linger_s)
        except BaseException:
            await db.dispose()
            raise
        store._writer.start()
        store._charges.start()
        return store

    async def close(self) -> None:
        """Write out pending usage, then release every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for writer in (self._writer, self._charges):
            journal = await writer.close()
            if journal is not None:  # its files are gone: its mark is of no more use
                await self._forget_mark(journal.name)
        await self._db.dispose()

    async def _forget_mark(self, journal: str) -> None:
        try:
            await self._db.write(lambda conn: marks.forget(conn, journal))
        except StorageError as exc:  # a row left behind, harmless
            logger.warning("journal mark %s not dropped: %s", journal, exc)

    @property
    def dialect(self) -> str:
        """The backend: "sqlite" or "postgresql"."""
        return self._db.dialect

    @property
    def database(self) -> Database:
        """The connections, for storage's own maintenance (the retention sweep)."""
        return self._db

    @property
    def clock(self) -> Clock:
        return self._clock

    def forget_cached(self) -> None:
        """Drop this process's copies of session rows (after rows were deleted under it)."""
        self._cache.clear()

    @property
    def stats(self) -> StoreStats:
        w = self._writer
        return StoreStats(
            w.written, w.failed, w.dropped, w.pending, self._session_reads, self._version_checks
        )

    async def ping(self) -> None:
        """Readiness: one round trip to the database."""
        await self._db.read(lambda conn: conn.exec_driver_sql("SELECT 1"))

    async def get_session(self, sk: SessionKey) -> SessionRecord | None:
        cached = self._cache.get(sk)
        if isinstance(cached, Miss) and self._db.versioned and self._cache.holds(sk):
            # On SQLite an old copy is still current unless another connection committed:
            # this process's usage writes go through the connection that asks, its other
            # writes drop their session's copy, and anything else moves the data version.
            # Without a copy (a session new to this process) there is nothing to renew: the
            # look is left to the next old copy, which serves nothing until it is made.
            self._version_checks += 1
            if self._db.changed_elsewhere():
                self._cache.clear()
            else:
                self._cache.vouch()
                cached = self._cache.get(sk)
        if not isinstance(cached, Miss):
            return cached
        if self._db.versioned and not self._db.looked:
            # The version every later look compares with, taken before the first row read
            # (a commit after it is then seen): without one, the first look clears all.
            self._version_checks += 1
            self._db.changed_elsewhere()
        epoch, unwritten = self._cache.epoch, self._unwritten.of(sk)
        quiet = self._unwritten.quiet()
        self._session_reads += 1
        record = await self._db.lookup(lambda conn: sessions.get(conn, sk))
        if self._unwritten.none_written_since(quiet):
            # None of the usage still unwritten is in the row: with it applied, the row is
            # what a copy kept since would be (on a busy session there always is some).
            record = self._unwritten.applied(record, sk)
        elif unwritten or self._unwritten.of(sk):
            # A batch written meanwhile may be in the row: its totals are unknown, so it is
            # not kept, and the next read asks the database again.
            return self._unwritten.over(record, sk, unwritten)
        self._cache.put(sk, record, epoch)
        return record

    # -- usage -------------------------------------------------------------------------

    def record_usage_later(self, u: UsageRecord) -> None:
        """Hand a usage record to the write-behind task; returns at once, never raises."""
        stamped = self._stamped(u)
        self._cache.apply_usage(stamped)
        dropped = self._writer.dropped
        self._writer.submit(stamped)
        if self._writer.dropped == dropped:
            self._unwritten.add(stamped)

    async def flush(self) -> None:
        """Wait until every record handed to record_usage_later (and every charge handed to
        record_charges_later) so far is written."""
        await self._writer.flush()
        await self._charges.flush()

    async def record_usage(self, u: UsageRecord) -> None:
        """The same as record_usage_later, but awaited (and errors raised)."""
        self._cache.drop(u.sk)
        await self._write_usage([self._stamped(u)], None)

    async def _write_usage(self, batch: list[UsageRecord], mark: Mark | None) -> None:
        async def write(conn: Executor) -> None:
            now = self._clock()
            await usage.apply(conn, batch, now)
            if mark is not None:
                await marks.advance(conn, mark, now)

        # A batch written inline holds the event loop: ~1.6 ms for 64 records, ~19 for 1000.
        self._unwritten.writing()
        try:
            if len(batch) <= INLINE_USAGE_RECORDS:
                await self._db.write_inline(write)
            else:
                await self._db.write(write)
        finally:
            self._unwritten.done(batch)

    def _stamped(self, u: UsageRecord) -> UsageRecord:
        return u if u.at is not None else dataclasses.replace(u, at=self._clock())

    # -- engine state, checkpoints, events ---------------------------------------------

    async def save_engine_state(
        self,
        sk: SessionKey,
        state: JSONObject,
        *,
        last_prompt_tokens: int | None | Unset = UNSET,
    ) -> None:
        """Replace the session's opaque engine state (creating the session if new)."""
        try:
            await self._db.write(
                lambda conn: sessions.save_engine_state(
                    conn, sk, state, last_prompt_tokens, self._clock()
                )
            )
        finally:
            # After the write: a read racing it may have cached the row as it was.
            self._cache.drop(sk)

    async def find_checkpoint(
        self, root: SessionKey, prefix_digests: Sequence[str]
    ) -> Checkpoint | None:
        """The newest checkpoint matching the client's prefix digests, or None, among all the
        lineages of the client's session id `root`; `Checkpoint.key` names the row holding it.

        prefix_digests[i] is the digest of messages[0..i] inclusive.
        """
        if not prefix_digests:
            return None
        kept = self._checkpoints
        return await self._db.lookup(
            lambda conn: checkpoints.find(conn, root, prefix_digests, kept)
        )

    async def live_lineages(self, root: SessionKey) -> list[SessionRecord]:
        """The session's lineages (one live row each), the most recently active first."""
        return await self._db.read(lambda conn: lineages.live(conn, root))

    async def fork_lineage(self, f: Fork) -> SessionRecord:
        """Start a lineage (see storage.rows.lineages); the session's least recently active forks
        beyond `f.max_lineages` are deleted with their checkpoints and archive."""
        try:
            return await self._db.write(lambda conn: lineages.fork(conn, f, self._clock()))
        finally:
            self._cache.clear()

    async def commit_compression(self, c: CompressionCommit) -> Checkpoint:
        """Checkpoint + archive + event + session update in one short write transaction."""
        try:
            return await self._db.write(lambda conn: checkpoints.commit(conn, c, self._clock()))
        finally:
            # After the write: a read racing it may have cached the row as it was.
            self._cache.drop(c.sk)
            if c.rotate_to is not None:
                self._cache.drop(SessionKey(c.sk.scope, c.rotate_to))

    async def add_event(self, e: EventRecord) -> int:
        """Store an event that produced no checkpoint (failed, noop, skipped); returns its id."""

        async def add(conn: AsyncConnection) -> int:
            now = self._clock()
            session_id = await sessions.ensure(conn, e.sk, "", now)
            return await events.insert(conn, session_id, e, e.checkpoint_id, now)

        try:
            return await self._db.write(add)
        finally:
            self._cache.drop(e.sk)

    # -- admin views -------------------------------------------------------------------

    async def list_sessions(
        self,
        *,
        scope: str | None = None,
        limit: int = 50,
        offset: int = 0,
        order: SessionOrder = "last_activity",
    ) -> list[SessionRecord]:
        """Sessions by last activity (newest first) or by total prompt tokens (most first)."""
        return await self._db.read(
            lambda conn: sessions.list_sessions(conn, scope, limit, offset, order)
        )

    async def session_detail(
        self, sk: SessionKey, *, max_points: int = 2000
    ) -> SessionDetail | None:
        """The session with its events, checkpoints (without their lists) and usage points."""

        async def detail(conn: AsyncConnection) -> SessionDetail | None:
            session_id = await sessions.find_id(conn, sk)
            if session_id is None:
                return None
            return SessionDetail(
                session=await sessions.get_by_id(conn, session_id),
                events=await events.for_session(conn, session_id),
                checkpoints=await checkpoints.infos(conn, session_id),
                usage=await usage.points(conn, session_id, max_points),
                archived_count=await checkpoints.archived_count(conn, session_id),
            )

        return await self._db.read(detail, snapshot=True)

    async def archived_messages(self, sk: SessionKey) -> list[ArchivedMessage]:
        """Original messages that compressions replaced, by position."""

        async def archived(conn: AsyncConnection) -> list[ArchivedMessage]:
            session_id = await sessions.find_id(conn, sk)
            return [] if session_id is None else await checkpoints.archived(conn, session_id)

        return await self._db.read(archived)

    async def lineage_archive(self, sk: SessionKey) -> list[ArchivedMessage]:
        """The originals compressions replaced in the session, the sessions it was rotated
        from and, below the fork, the lineage it forked from (one conversation, so positions
        do not collide), by position."""

        async def archived(conn: AsyncConnection) -> list[ArchivedMessage]:
            spans = await lineages.spans(conn, sk)
            return await checkpoints.archived_in(conn, spans) if spans else []

        return await self._db.read(archived)

    async def search_archive(
        self, sk: SessionKey, query: str, limit: int = 5
    ) -> list[ArchivedMessage]:
        """The originals of the session's lineage (see lineage_archive) that match `query`
        best, best first, through the database's full-text index (storage.rows.terms says how a
        text is read into terms)."""

        return (await self.search_archive_each(sk, [(query, limit)]))[0]

    async def search_archive_each(
        self, sk: SessionKey, queries: Sequence[tuple[str, int]]
    ) -> list[list[ArchivedMessage]]:
        """`search_archive` of each (query, limit), in order, in one read. On SQLite the read
        runs on the calling thread (`Database.lookup`): through the pool's thread it cost
        three times the searches' own work (2.1 against 0.7 ms of CPU for a name and a
        question). A search ranks at most `search.CANDIDATES` matches, however large the
        archive (bench/recall_search.py)."""

        async def found(conn: Executor) -> list[list[ArchivedMessage]]:
            spans = await lineages.spans(conn, sk)
            return [await search.search(conn, spans, query, limit) for query, limit in queries]

        return await self._db.lookup(found) if queries else []

    async def fetch_archived(
        self, sk: SessionKey, positions: Sequence[int]
    ) -> list[ArchivedMessage]:
        """The newest original archived at each of `positions` in the session's lineage, by
        position; positions nothing was archived at are left out."""

        async def fetched(conn: AsyncConnection) -> list[ArchivedMessage]:
            spans = await lineages.spans(conn, sk)
            return await search.fetch(conn, spans, positions)

        return await self._db.read(fetched)

    async def archive_facts(self, sk: SessionKey) -> ArchiveFacts | None:
        """The session's newest checkpoint and archived positions (None: no such session)."""

        async def facts(conn: AsyncConnection) -> ArchiveFacts | None:
            spans = await lineages.spans(conn, sk)
            return None if not spans else await checkpoints.facts(conn, spans)

        return await self._db.read(facts, snapshot=True)

    async def delete_session(self, sk: SessionKey, *, keep_totals: bool = True) -> bool:
        """Delete the session -- its own row and its lineages' (forks, rotations) -- with
        every row they have in any table: checkpoints, archive, events, usage, charges, shadow
        checks, leases. With `keep_totals` its usage, charges and shadow checks are first
        added into the daily totals, so that the figures over all sessions stay the same.
        What this process still holds for it in the write-behind is written (and deleted)
        first."""
        await self.flush()
        try:
            return await self._db.write(lambda conn: sessions.delete_session(conn, sk, keep_totals))
        finally:
            self._cache.clear()  # the session's forks went with it
            self._checkpoints.clear()  # and their compressed views

    # -- model windows -----------------------------------------------------------------

    async def get_model_windows(self) -> dict[str, int]:
        return await self._db.read(windows.get_all)

    async def set_model_window(self, model: str, tokens: int) -> None:
        await self._db.write(lambda conn: windows.set_window(conn, model, tokens, self._clock()))
