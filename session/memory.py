"""What this process runs and remembers per session: the row lookup (following rotations),
the lineage a request continues (see "lineages" below), background compressions, the last
view it served, when it last committed a compression.

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
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from compression import EngineState, Message
from session.turn import Turn
from storage import Fork, SessionKey, SessionRecord, SessionStore, StorageError

log = logging.getLogger("ctxgate.sessions")

_MAX_CHILD_HOPS = 64
_REMEMBERED = 20_000
# An answer's bookkeeping runs as soon as it is sent; one still marked after this long was
# never sent (its client went away first), so it no longer counts as pending.
_ANSWER_STALE_S = 10.0

Activity = Literal["idle", "pending", "running"]


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
        self._job_roots: dict[SessionKey, SessionKey] = {}  # job's key -> its client's session
        # Per client session: answers sent whose bookkeeping (which decides on a background
        # compression) has not run yet, and when the newest of them was sent.
        self._answering: dict[SessionKey, tuple[int, float]] = {}
        self.marks: OrderedDict[SessionKey, ViewMark] = OrderedDict()
        self.held: OrderedDict[SessionKey, HeldTurn | Turn] = OrderedDict()
        self._held_size = 0
        self._committed_at: OrderedDict[SessionKey, float] = OrderedDict()
        # The lineage each session id's latest request continued (when not the id's own row).
        self._latest: OrderedDict[SessionKey, SessionKey] = OrderedDict()
        # Each lineage's tip as this process last served it: the row's own arrives with the
        # usage write-behind, a moment later.
        self.tips: OrderedDict[SessionKey, Tip] = OrderedDict()
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

    def start_job(
        self, key: SessionKey, coro: Coroutine[Any, Any, None], root: SessionKey | None = None
    ) -> None:
        """A session's background compression; at most one runs per session. `root`: the
        client's session the job's lineage belongs to (default `key`)."""
        task = self.spawn(coro)
        self.jobs[key] = task
        self._job_roots[key] = root or key
        task.add_done_callback(lambda _task: self._job_done(key, task))

    def _job_done(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self.jobs.get(key) is task:
            del self.jobs[key]
            self._job_roots.pop(key, None)

    def answering(self, root: SessionKey) -> None:
        """An answer of the client session `root` is on its way out; its bookkeeping follows."""
        count, _ = self._answering.pop(root, (0, 0.0))
        self._answering[root] = (count + 1, time.monotonic())
        while len(self._answering) > _REMEMBERED:  # the oldest first: stale ones among them
            del self._answering[next(iter(self._answering))]

    def answered(self, root: SessionKey) -> None:
        """The bookkeeping of one of `root`'s answers has run (a background compression, when
        due, is started by then)."""
        count, since = self._answering.pop(root, (0, 0.0))
        if count > 1:
            self._answering[root] = (count - 1, since)

    def activity(self, key: SessionKey) -> Activity:
        """What this process does about compressing `key` (a client's session id, or one of
        its lineages' keys) in the background: `running` while a compression runs for it,
        `pending` while an answer it sent has not been through the bookkeeping that decides
        on one, else `idle`."""
        if key in self.jobs or key in self._job_roots.values():
            return "running"
        count, since = self._answering.get(key, (0, 0.0))
        if count and time.monotonic() - since < _ANSWER_STALE_S:
            return "pending"
        return "idle"

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
        self._note_latest(turn.root, key)
        if turn.digests:
            self.tips[key] = Tip(len(turn.digests), turn.digests[-1])
            self.tips.move_to_end(key)
            while len(self.tips) > _REMEMBERED:
                self.tips.popitem(last=False)
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
        """The session's last turn (on whichever lineage), when this process holds it."""
        held = self.held.get(self._latest.get(key, key))
        return held.turn() if isinstance(held, HeldTurn) else held

    def _note_latest(self, root: SessionKey, key: SessionKey) -> None:
        if root == key:
            self._latest.pop(root, None)
            return
        self._latest[root] = key
        self._latest.move_to_end(root)
        while len(self._latest) > _REMEMBERED:
            self._latest.popitem(last=False)

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
        self.tips.pop(key, None)
        self._release(key)
        self._committed_at.pop(key, None)
        self._answering.pop(key, None)
        self._job_roots.pop(key, None)
        job = self.jobs.pop(key, None)
        if job is not None:
            job.cancel()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


# ---- lineages -------------------------------------------------------------------------
# Which conversation of a session a request continues: its lineage.
#
# A derived session id is a hash of the opening, and an explicit one names a client's session,
# not a history: two runs of one task, a rewind or an edited earlier message all arrive under
# one id with histories that share an opening and then diverge. Each lineage keeps its own
# checkpoints, engine state, anchor and archive (storage.rows.lineages). A lineage's tip is the
# client prefix of its latest request; a request continues the lineage whose tip it extends
# (the longest such), and one that extends none starts a fork.
#
# Only a compressed session has lineages to tell apart (before its first compression it holds
# no checkpoint and no archive), and its requests are digested anyway to find their checkpoint:
# a request that extends the session row's own tip costs one comparison more; only a request on
# another lineage reads the session's lineages, and only a new fork writes.

MAX_LINEAGES = 8
_TAG = 12  # hex digits of the fork's first digest in its key


@dataclass(frozen=True, slots=True)
class Tip:
    """A lineage's latest client prefix: its length and chained digest."""

    length: int
    digest: str


@dataclass(frozen=True, slots=True)
class Placement:
    """The lineage a request continues, or the fork it starts (`fork` set)."""

    record: SessionRecord | None
    fork: Fork | None = None


def extends(
    record: SessionRecord, digests: Sequence[str], served: Mapping[SessionKey, Tip]
) -> int | None:
    """How long a tip of `record` the request extends (0: no tip recorded), else None. The
    tip is the longer of the row's and the one this process served last (`served`)."""
    length, digest = record.tip_len, record.tip_digest
    mine = served.get(record.sk)
    if mine is not None and mine.length > (length or 0):
        length, digest = mine.length, mine.digest
    if not length or digest is None:
        return 0
    if length <= len(digests) and digests[length - 1] == digest:
        return length
    return None


def place(
    turn: Turn,
    lineages: Sequence[SessionRecord],
    served: Mapping[SessionKey, Tip],
    max_lineages: int,
) -> Placement:
    """The lineage whose tip the request extends furthest, else a fork of the row holding the
    checkpoint the request uses (which it shares its first `prefix_len` messages with)."""
    digests = turn.digests
    assert digests is not None and turn.session is not None
    best: SessionRecord | None = None
    reach = -1
    for record in lineages:
        length = extends(record, digests, served)
        if length is not None and length > reach:
            best, reach = record, length
    if best is not None:
        return Placement(best)
    root = turn.root
    inherited = turn.checkpoint_key is not None
    return Placement(
        None,
        Fork(
            root=root,
            key=f"{root.key}#{digests[-1][:_TAG]}",
            model=turn.request.model,
            fork_of=turn.checkpoint_key,
            fork_len=turn.prefix_len if inherited else 0,
            tip_len=len(digests),
            tip_digest=digests[-1],
            engine_state=fork_state(turn.state).to_json(),
            max_lineages=max_lineages,
        ),
    )


def fork_state(state: EngineState) -> EngineState:
    """A new lineage's engine state: what concerns the summary model (its failures and
    cooldown, its calibration) carries over; what judged the other lineage's views does not."""
    return EngineState(
        cooldown_until=state.cooldown_until,
        cooldown_reason=state.cooldown_reason,
        failure_streak=dict(state.failure_streak),
        summary_calibration=state.summary_calibration,
    )


class Lineages:
    def __init__(
        self,
        store: SessionStore,
        served: Mapping[SessionKey, Tip],
        max_lineages: int = MAX_LINEAGES,
    ) -> None:
        self.store = store
        self.served = served  # `Sessions.tips`
        self.max_lineages = max_lineages

    async def placed(self, turn: Turn) -> Turn:
        """The turn on the lineage it continues (a new fork when it continues none). Needs the
        turn's digests and checkpoint (`Compactor.apply_checkpoint`)."""
        session = turn.session
        digests = turn.digests
        if session is None or digests is None or extends(session, digests, self.served) is not None:
            return turn
        try:
            lineages = await self.store.live_lineages(turn.root)
            found = place(turn, lineages, self.served, self.max_lineages)
            record = found.record
            if found.fork is not None:
                record = await self.store.fork_lineage(found.fork)
        except StorageError as exc:
            log.warning("lineage lookup failed; going on in the session's row: %s", exc)
            return turn
        assert record is not None
        if record.sk == turn.key:
            return turn
        state = EngineState.from_json(record.engine_state)
        return replace(turn, key=record.sk, session=record, state=state)
