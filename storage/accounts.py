"""Accounts: the store's side that keeps what was spent -- charges (one per upstream call),
shadow checks, the kept daily totals of deleted sessions -- and the per-session compression
switch, which the same admin and ledger readers ask for.

`Accounts` is a part of SessionStore (storage.store), not an object of its own: it holds no
state, and reaches the store's database, clock and charge write-behind through the
attributes declared below. Charges handed to `record_charges_later` are written behind in
batches (storage.writer); the reads that report them wait for those handed over first.

Imports sqlalchemy and storage's own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database.db import Database
from storage.database.inline import Executor
from storage.journal import Mark
from storage.records import SessionKey
from storage.rows import charges as savings
from storage.rows import daily, events, marks, switches
from storage.writer import UsageWriter


class Accounts:
    """Charges, shadow checks, their daily totals and the per-session switches."""

    _db: Database
    _clock: Callable[[], float]
    _charges: UsageWriter[savings.ChargeRow]

    async def record_charges(self, rows: Sequence[savings.ChargeRow]) -> None:
        await self._write_charges(list(rows), None)

    def record_charges_later(self, rows: Sequence[savings.ChargeRow]) -> None:
        """Hand charges to their write-behind task; returns at once, never raises. The reads
        that report charges (`charge_groups`, `charges_of`) wait for those handed over."""
        for row in rows:
            self._charges.submit(row)

    async def _write_charges(self, rows: list[savings.ChargeRow], mark: Mark | None) -> None:
        async def write(conn: Executor) -> None:
            await savings.add_charges(conn, rows)
            if mark is not None:
                await marks.advance(conn, mark, self._clock())

        await self._db.write_inline(write)

    async def last_full_prompt(self, sk: SessionKey) -> tuple[int, float] | None:
        """The newest client request's uncompressed prompt tokens and time, if any, among
        those written (the ledger remembers this process's own newest ones itself)."""
        return await self._db.read(lambda conn: savings.last_full_prompt(conn, sk))

    async def charge_groups(
        self, keys: Sequence[SessionKey] | None = None, per_session: bool = False
    ) -> list[savings.ChargeGroup]:
        """Charges summed by model, kind and compressed (and session when `per_session`) of
        the sessions `keys`; over all (None, not per session) the deleted sessions' kept daily
        totals are in the sums too."""
        await self._charges.flush()

        async def read(conn: AsyncConnection) -> list[savings.ChargeGroup]:
            live = await savings.charge_groups(conn, keys, per_session)
            if keys is not None or per_session:
                return live
            return daily.merged_charges([*live, *await daily.charge_totals(conn)])

        return await self._db.read(read, snapshot=True)

    async def charges_of(self, sk: SessionKey, limit: int = 1000) -> list[savings.ChargeRow]:
        """The session's newest `limit` charges (one per upstream call), oldest first."""
        await self._charges.flush()
        return await self._db.read(lambda conn: savings.charges_of(conn, sk, limit))

    async def record_shadow(self, row: savings.ShadowRow) -> None:
        await self._db.write_inline(lambda conn: savings.add_shadow(conn, row))

    async def shadow_groups(self, sk: SessionKey | None = None) -> list[savings.ShadowGroup]:
        """Shadow checks by model and trigger, of one session or of all (then with the
        deleted sessions' kept daily totals)."""

        async def read(conn: AsyncConnection) -> list[savings.ShadowGroup]:
            live = await savings.shadow_groups(conn, sk)
            if sk is not None:
                return live
            return daily.merged_shadow([*live, *await daily.shadow_totals(conn)])

        return await self._db.read(read, snapshot=True)

    async def checkpoint_trigger(self, checkpoint_id: int) -> str | None:
        """The trigger of the compression that made the checkpoint, if its event is kept."""
        return await self._db.read(lambda conn: events.trigger_of(conn, checkpoint_id))

    # -- per-session switches ----------------------------------------------------------

    async def compression_off(self, keys: Sequence[SessionKey]) -> set[SessionKey]:
        """Those of `keys` (client session ids) whose compression is switched off."""
        return await self._db.lookup(lambda conn: switches.compression_off(conn, keys))

    async def any_compression_off(self) -> bool:
        """Whether any session's compression is switched off."""
        return await self._db.lookup(switches.any_off)

    async def set_compression(self, sk: SessionKey, off: bool) -> None:
        await self._db.write(lambda conn: switches.set_compression(conn, sk, off, self._clock()))
