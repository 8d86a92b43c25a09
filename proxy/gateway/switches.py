"""Compression switched off for one session, without a restart.

A request turns it off (or on) with the header `x-ctxgate-compression: off` (`on`), an
operator with the admin API; either is stored with the session (the client's session id), so
it holds for the session's later requests, on every replica. A request without the header
reads the stored switch, remembered here as long as a session row is (`storage.session_cache_s`):
a switch set on another replica is seen there that much later at most. That no session at all
has its compression off (most databases hold no switch) is remembered as long: a session this
process has not seen then costs no read of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from session.errors import BadRequest
from storage import SessionKey, SessionStore, StorageError

log = logging.getLogger("ctxgate.gateway")

HEADER = "x-ctxgate-compression"
_VALUES = {"off": True, "on": False}
_REMEMBERED = 10_000


def asked_off(headers: Mapping[str, str]) -> bool | None:
    """What the request's header asks: True (off), False (on), None (nothing)."""
    value = headers.get(HEADER)
    if value is None:
        return None
    off = _VALUES.get(value.strip().lower())
    if off is None:
        raise BadRequest(
            f"The header '{HEADER}' takes 'on' or 'off', not {value[:40]!r}.", param=HEADER
        )
    return off


class Switches:
    def __init__(
        self,
        store: SessionStore,
        kept_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.kept_s = kept_s  # how long a switch read from the database is trusted
        self.clock = clock
        self._known: dict[SessionKey, tuple[bool, float]] = {}
        # Whether any session's compression was off when the store was last asked, and when.
        self._anywhere: tuple[bool, float] | None = None
        self.reads = 0  # reads of the store (the whole table's or one session's)

    async def compression_off(self, sk: SessionKey, headers: Mapping[str, str]) -> bool:
        """Whether compression is off for this request of the session `sk` (the client's
        session id); a header that switches it is stored first."""
        asked = asked_off(headers)
        known = self._known.get(sk)
        fresh = known is not None and self.clock() - known[1] < self.kept_s
        if asked is not None:
            if not fresh or known is None or known[0] != asked:
                await self._store_asked(sk, asked)
            return asked
        if fresh and known is not None:
            return known[0]
        if await self._none_off():
            return False
        try:
            self.reads += 1
            off = sk in await self.store.compression_off([sk])
        except StorageError as exc:
            log.warning("could not read session %s's compression switch: %s", sk.key, exc)
            return known[0] if known is not None else False
        self._remember(sk, off)
        return off

    async def _none_off(self) -> bool:
        """Whether no session had its compression off when the store was last asked, no longer
        ago than a session's own switch is trusted."""
        if self.kept_s <= 0:
            return False  # nothing is trusted: the session's own switch is read
        known = self._anywhere
        if known is None or self.clock() - known[1] >= self.kept_s:
            try:
                self.reads += 1
                anywhere = await self.store.any_compression_off()
            except StorageError as exc:
                log.warning("could not read the compression switches: %s", exc)
                return False
            known = self._anywhere = (anywhere, self.clock())
        return not known[0]

    async def _store_asked(self, sk: SessionKey, off: bool) -> None:
        """A header's switch: this request has it whatever the database says; a store that
        fails keeps it to this process (and says so) rather than failing the request."""
        try:
            await self.set(sk, off)
        except StorageError as exc:
            log.warning("could not store session %s's compression switch: %s", sk.key, exc)
            self._remember(sk, off)

    async def set(self, sk: SessionKey, off: bool) -> None:
        """Store the switch (and know it here at once)."""
        await self.store.set_compression(sk, off)
        self._remember(sk, off)

    def _remember(self, sk: SessionKey, off: bool) -> None:
        if off:
            self._anywhere = (True, self.clock())
        if len(self._known) >= _REMEMBERED:
            self._known.clear()
        self._known[sk] = (off, self.clock())
