"""What this process runs and remembers per session: the row lookup (following rotations),
background compressions, the last view it served, when it last committed a compression.

Of each session's last view it keeps a mark (its length, first and last message: enough to
tell whether the next request continues it) and, within a byte budget, the turn, which the
manual compression API compresses at once. The turn is held without its parsed request (see
`HeldTurn`), read again from the request's bytes when it is needed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from compression.types import Message
from proxy.core.turn import Turn
from storage import SessionKey, SessionRecord, SessionStore, StorageError

log = logging.getLogger("ctxgate.sessions")

_MAX_CHILD_HOPS = 64
_REMEMBERED = 20_000


@dataclass(frozen=True, slots=True)
class ViewMark:
    """Enough of a served view to tell whether a later one continues it."""

    length: int
    first: Message
    last: Message

    def continued_by(self, view: list[Message]) -> bool:
        """Whether `view` extends this one (an edit, a fork or a new checkpoint breaks it).

        Comparing the first and the last message is enough in practice and costs two dict
        comparisons instead of a pass over the history.
        """
        n = self.length
        return len(view) >= n > 0 and view[0] == self.first and view[n - 1] == self.last


@dataclass(frozen=True, slots=True)
class HeldTurn:
    """A served turn as this process holds it: without the objects parsed from its request,
    which `turn()` parses again from the request's bytes (the same bytes give the same
    request: front doors parse without state).

    A parsed history is thousands of objects. Freed at the end of their own request they are
    still in the CPU's caches; freed a request later, when the next turn replaces them here,
    nearly each one is a cache miss (on a 64K-token history, a third of a millisecond of
    every request). The turn keeps what is not the client's: the view's leading messages
    from a checkpoint or a compression (`view[:replacement_len]`).
    """

    light: Turn  # request without body, messages and tools; view cut to its leading part
    client_view: bool  # the view was the request's own message list (nothing replaced)

    @staticmethod
    def of(turn: Turn) -> HeldTurn | Turn:
        """The turn to hold: a `HeldTurn`, or the turn itself when its view is not the
        checkpoint's messages followed by the client's (images shrunk after a refusal)."""
        view, messages = turn.view, turn.request.messages
        client_view = view is messages
        head, start = turn.replacement_len, turn.prefix_len
        if not client_view and (
            len(view) - head != len(messages) - start
            or not all(a is b for a, b in zip(view[head:], messages[start:], strict=True))
        ):
            return turn
        request = replace(turn.request, body={}, messages=[], tools=None)
        return HeldTurn(replace(turn, request=request, view=view[:head]), client_view)

    def turn(self) -> Turn:
        light = self.light
        request = light.door.parse(light.request.raw)
        messages = request.messages
        view = messages if self.client_view else light.view + messages[light.prefix_len :]
        return replace(light, request=request, view=view)


class Sessions:
    def __init__(
        self,
        store: SessionStore,
        clock: Callable[[], float] = time.time,
        held_bytes: int = 128 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.clock = clock
        self.held_bytes = held_bytes
        self.jobs: dict[SessionKey, asyncio.Task[None]] = {}
        self.marks: OrderedDict[SessionKey, ViewMark] = OrderedDict()
        self.held: OrderedDict[SessionKey, HeldTurn | Turn] = OrderedDict()
        self._held_size = 0
        self._committed_at: OrderedDict[SessionKey, float] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def lookup(self, key: SessionKey) -> tuple[SessionKey, SessionRecord | None]:
        """The session row, following rotation links to the newest child."""
        try:
            session = await self.store.get_session(key)
            hops = 0
            while session is not None and session.child_key and hops < _MAX_CHILD_HOPS:
                key = SessionKey(key.scope, session.child_key)
                session = await self.store.get_session(key)
                hops += 1
        except StorageError as exc:
            log.warning("session lookup failed; serving without session state: %s", exc)
            return key, None
        return key, session

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` beside the request path; cancelled when the process closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start_job(self, key: SessionKey, coro: Coroutine[Any, Any, None]) -> None:
        """A session's background compression; at most one runs per session."""
        task = self.spawn(coro)
        self.jobs[key] = task
        task.add_done_callback(lambda _task: self.jobs.pop(key, None))

    async def await_job(self, key: SessionKey, timeout_s: float) -> bool:
        """Wait (bounded) for this session's background compression; True if there was one."""
        job = self.jobs.get(key)
        if job is None:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(job), timeout=timeout_s)
        except (TimeoutError, Exception):  # the job logs its own failures
            pass
        return True

    def remember(self, turn: Turn) -> None:
        """Note the view `turn` served; hold the turn itself while the byte budget allows."""
        key, view = turn.key, turn.view
        if view:
            self.marks[key] = ViewMark(len(view), view[0], view[-1])
            self.marks.move_to_end(key)
            while len(self.marks) > _REMEMBERED:
                self.marks.popitem(last=False)
        self._release(key)
        size = len(turn.request.raw)
        if size > self.held_bytes:
            return
        self.held[key] = HeldTurn.of(turn)
        self._held_size += size
        while self._held_size > self.held_bytes:
            self._release(next(iter(self.held)))

    def held_turn(self, key: SessionKey) -> Turn | None:
        """The session's last turn, when this process holds it."""
        held = self.held.get(key)
        return held.turn() if isinstance(held, HeldTurn) else held

    def _release(self, key: SessionKey) -> None:
        dropped = self.held.pop(key, None)
        if dropped is not None:
            light = dropped.light if isinstance(dropped, HeldTurn) else dropped
            self._held_size -= len(light.request.raw)

    @property
    def held_size(self) -> int:
        """Request bytes of the turns held now."""
        return self._held_size

    def mark_committed(self, key: SessionKey) -> None:
        self._committed_at[key] = self.clock()
        self._committed_at.move_to_end(key)
        while len(self._committed_at) > _REMEMBERED:
            self._committed_at.popitem(last=False)

    def committed_since(self, key: SessionKey, since: float) -> bool:
        return self._committed_at.get(key, 0.0) > since

    def forget(self, key: SessionKey) -> None:
        """Drop what this process remembers of a deleted session; cancel its background job."""
        self.marks.pop(key, None)
        self._release(key)
        self._committed_at.pop(key, None)
        job = self.jobs.pop(key, None)
        if job is not None:
            job.cancel()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
