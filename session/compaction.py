"""Running the context engine for a request, under the session lock, and committing the result.

Every path that compresses (hygiene, preflight, background after a response, overflow
recovery, the manual API) goes through `Compactor.compress`, which:
  1. takes the session lock (in-process + database lease); on timeout the request goes on
     uncompressed;
  2. looks again for a checkpoint another path may have committed while it waited;
  3. runs the engine on the view (never on the client's raw list); the built-in engine's
     passes run in the process pool (`pool.py`) when the server has one;
  4. commits checkpoint + archive + event + engine state in one transaction.
Database errors never lose the request: the compressed view is still used for this request.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from compression import (
    CompressionContext,
    CompressionResult,
    Compressor,
    ContextEngine,
    Message,
    Summarizer,
    TokenCounter,
    Trigger,
    chain_digest,
    chained_digests,
    clipped_originals,
    seen_messages,
    with_handles,
)
from session.pool import EnginePool
from session.provenance import (
    Replacement,
    Sources,
    aligned_sources,
    replaced_positions,
    replacement,
    view_sources,
)
from session.turn import CompressionNote, Turn, reservation
from storage import (
    CompressionCommit,
    EventRecord,
    SessionKey,
    SessionLocks,
    SessionStore,
    StorageError,
)

log = logging.getLogger("ctxgate.compaction")

COMMITTED = ("compressed", "fallback")
DIGESTS_KEPT = 16  # sessions whose last messages' digests are kept (with the messages)
HASHED_ON_LOOP = 2000  # messages to hash above which a thread hashes them


@dataclass(frozen=True, slots=True)
class Applied:
    """What one compression attempt did: its outcome and the turn to go on with (the same view
    when nothing was committed; the engine state may have moved either way)."""

    changed: bool
    outcome: str
    error: str | None
    turn: Turn


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A manual compression left to the session's next request (this process does not hold
    its latest view)."""

    key: SessionKey


def manual_answer(done: Applied | Scheduled) -> tuple[int, SessionKey, dict[str, Any]]:
    """A manual compression's status, session and answer (less the session's name, which the
    public and the admin API each give their way)."""
    if isinstance(done, Scheduled):
        return (
            202,
            done.key,
            {
                "compressed": False,
                "outcome": "scheduled",
                "error": None,
                "tokens_before": None,
                "tokens_after": None,
                "checkpoint_id": None,
                "messages_after": None,
            },
        )
    turn = done.turn
    note = turn.notes[-1] if turn.notes else None
    return (
        200,
        turn.key,
        {
            "compressed": done.changed,
            "outcome": done.outcome,
            "error": done.error,
            "tokens_before": note.tokens_before if note else None,
            "tokens_after": note.tokens_after if note else None,
            "checkpoint_id": note.checkpoint_id if note else None,
            "messages_after": len(turn.view),
        },
    )


class Compactor:
    def __init__(
        self,
        *,
        store: SessionStore,
        locks: SessionLocks,
        engine: ContextEngine,
        lock_wait_s: float,
        in_place: bool,
        handles: bool = True,
        clock: Callable[[], float] = time.time,
        observe: Callable[[str, str, int, int], None] | None = None,
        pool: EnginePool | None = None,
    ) -> None:
        self.store = store
        self.locks = locks
        self.engine = engine
        self.lock_wait_s = lock_wait_s
        self.in_place = in_place
        self.handles = handles  # name the archive's handles in what compressions write
        self.clock = clock
        # (trigger, outcome, tokens before, tokens after) of every engine pass, whatever
        # started it: arrival, background, overflow or manual.
        self.observe = observe or (lambda *_: None)
        # Where the built-in engine's passes run: worker processes, off the event loop.
        self.pool = pool
        self.digests = DigestMemo()

    async def apply_checkpoint(self, turn: Turn) -> Turn:
        """The turn using the newest checkpoint matching the client's prefix, if one is newer
        than the one it uses."""
        turn = await self.digested(turn)
        assert turn.digests is not None
        try:
            checkpoint = await self.store.find_checkpoint(turn.root, list(turn.digests))
        except StorageError as exc:
            log.warning("checkpoint lookup failed; going on without: %s", exc)
            return turn
        if checkpoint is None or checkpoint.id == turn.checkpoint_id:
            return turn
        if turn.checkpoint_id is not None and checkpoint.prefix_len < turn.prefix_len:
            return turn
        # Storage keeps plain JSON objects; they are the same wire dicts the client sent.
        replacement = cast(list[Message], checkpoint.messages)
        view = replacement + turn.messages[checkpoint.prefix_len :]
        return turn.with_view(
            view,
            prefix_len=checkpoint.prefix_len,
            checkpoint_id=checkpoint.id,
            sources=checkpoint.sources,
            checkpoint_key=checkpoint.key,
        )

    async def digested(self, turn: Turn) -> Turn:
        """`turn.with_digests()`, hashing only what its session's last request did not hold."""
        if turn.digests is not None:
            return turn
        digests = await self.digests.chained_off_loop(turn.key, turn.messages)
        return replace(turn, digests=tuple(digests))

    async def compress(
        self,
        turn: Turn,
        *,
        trigger: Trigger,
        counter: TokenCounter,
        summarize: Summarizer | None,
        force: bool = False,
        focus: str | None = None,
        current_tokens: int | None = None,
        summary_token_ratio: float | None = None,
        summary_context_length: int | None = None,
    ) -> Applied:
        async with self.locks.hold(turn.key, wait_s=self.lock_wait_s) as got:
            if not got:
                return Applied(False, "lock_timeout", "another compression holds the session", turn)
            if not force:
                # Another path may have committed while this one waited for the lock.
                reused = await self.apply_checkpoint(turn)
                if reused.checkpoint_id != turn.checkpoint_id:
                    return Applied(True, "reused", None, reused)
            turn = await self.digested(turn)
            ctx = CompressionContext(
                model=turn.request.model,
                context_length=turn.context_length,
                max_output_tokens=reservation(turn),
                counter=counter,
                summarize=summarize,
                state=turn.state,
                tools=turn.request.tools,
                trigger=trigger,
                force=force,
                focus=focus,
                current_tokens=current_tokens,
                now=self.clock(),
                summary_context_length=summary_context_length,
                summary_token_ratio=summary_token_ratio,
                due=True,
                originals=clipped_originals(turn.view, turn.messages),
            )
            started = time.perf_counter()
            result = await self._run(turn.view, ctx)
            duration_ms = (time.perf_counter() - started) * 1000
            if result.outcome != "skipped":
                self.observe(trigger, result.outcome, result.tokens_before, result.tokens_after)
            _log_outcome(turn, trigger, result, duration_ms)
            if result.outcome not in COMMITTED:
                await self._record_miss(turn, trigger, result, duration_ms)
                missed = replace(turn, state=result.state)
                return Applied(False, result.outcome, result.error, missed)
            origins = _origins(turn)
            replaced = replacement(turn.view, result.messages, origins)
            if self.handles:
                result = replace(result, messages=_with_handles(turn, result.messages, replaced))
            key, checkpoint_id = await self._commit(turn, trigger, result, replaced, duration_ms)
            note = CompressionNote(
                trigger,
                result.outcome,
                result.tokens_before,
                result.tokens_after,
                checkpoint_id,
                _clip_labels(result, origins),
            )
            done = turn.with_view(
                result.messages,
                prefix_len=len(turn.messages),
                checkpoint_id=checkpoint_id,
                sources=replaced.sources,
                checkpoint_key=key.key,
            )
            done = replace(
                done,
                key=key,
                state=result.state,
                estimate=result.tokens_after,
                notes=(*turn.notes, note),
            )
            return Applied(True, result.outcome, result.error, done)

    async def _run(self, view: list[Message], ctx: CompressionContext) -> CompressionResult:
        if self.pool is not None and isinstance(self.engine, Compressor):
            return await self.pool.compress(self.engine, view, ctx)
        return await self.engine.compress(view, ctx)

    async def _commit(
        self,
        turn: Turn,
        trigger: str,
        result: CompressionResult,
        replaced: Replacement,
        duration_ms: float,
    ) -> tuple[SessionKey, int | None]:
        """Store the compression; the session key it lives under now, and its checkpoint id."""
        assert turn.digests is not None
        event = EventRecord(
            sk=turn.key,
            trigger=trigger,
            outcome=result.outcome,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            messages_before=len(turn.view),
            messages_after=len(result.messages),
            duration_ms=duration_ms,
            error=result.error,
        )
        commit = CompressionCommit(
            sk=turn.key,
            model=turn.request.model,
            prefix_len=len(turn.messages),
            prefix_digest=turn.digests[-1],
            messages=_plain(result.messages),
            summary=result.summary,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            archived=[(p, cast(dict[str, Any], turn.messages[p])) for p in replaced.archived],
            event=event,
            engine_state=result.state.to_json(),
            rotate_to=None if self.in_place else f"{turn.key.key}~{uuid.uuid4().hex[:8]}",
            sources=replaced.sources,
        )
        try:
            checkpoint = await self.store.commit_compression(commit)
        except StorageError as exc:
            log.error("could not store a compression; this request still uses it: %s", exc)
            return turn.key, None
        return SessionKey(checkpoint.scope, checkpoint.key), checkpoint.id

    async def _record_miss(
        self, turn: Turn, trigger: str, result: CompressionResult, duration_ms: float
    ) -> None:
        if result.outcome == "skipped":
            return
        event = EventRecord(
            sk=turn.key,
            trigger=trigger,
            outcome=result.outcome,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            messages_before=len(turn.view),
            messages_after=len(result.messages),
            duration_ms=duration_ms,
            error=result.error,
        )
        try:
            await self.store.add_event(event)
            await self.store.save_engine_state(turn.key, result.state.to_json())
        except StorageError as exc:
            log.warning("could not record a compression attempt: %s", exc)


def _log_outcome(turn: Turn, trigger: str, result: CompressionResult, duration_ms: float) -> None:
    """One info line per compression that ran: figures and outcome, never content (an error's
    text may quote the summary model's answer)."""
    if result.outcome == "skipped":
        return
    log.info(
        "session %s: compression (%s) %s: %d -> %d tokens in %.0f ms",
        turn.key.key,
        trigger,
        result.outcome,
        result.tokens_before,
        result.tokens_after,
        duration_ms,
    )


class DigestMemo:
    """Each recent session's last client messages and their chained digests: a body parsed
    only as far as it grew keeps its earlier messages as the same objects, whose digests need
    no hashing again."""

    def __init__(self, sessions: int = DIGESTS_KEPT) -> None:
        self.sessions = sessions
        self._kept: OrderedDict[SessionKey, tuple[Sequence[Message], list[str]]] = OrderedDict()
        self.hashed = 0  # messages hashed (the rest reused)

    def chained(self, key: SessionKey, messages: Sequence[Message]) -> list[str]:
        """`chained_digests(messages)`."""
        reused = self._reused(key, messages)
        return self._keep(key, messages, _extended(reused, messages), len(reused))

    async def chained_off_loop(self, key: SessionKey, messages: Sequence[Message]) -> list[str]:
        """`chained`, hashing in a thread when there is much to hash: a first-seen history of
        thousands of messages took the event loop for 100 ms and more (the thread yields the
        GIL every switch interval)."""
        reused = self._reused(key, messages)
        if len(messages) - len(reused) < HASHED_ON_LOOP:
            digests = _extended(reused, messages)
        else:
            digests = await asyncio.to_thread(_extended, reused, messages)
        return self._keep(key, messages, digests, len(reused))

    def _reused(self, key: SessionKey, messages: Sequence[Message]) -> list[str]:
        """The kept digests of the leading messages the session's last request held as the
        same objects (the session's entry is taken out: `_keep` puts it back)."""
        earlier = self._kept.pop(key, None)
        if earlier is None:
            return []
        before, chain = earlier
        limit = min(len(before), len(messages))
        # One pass in C for the common case (every kept message held again): a Python loop
        # over an 800K-token history's 15,500 messages took the event loop for milliseconds.
        if all(map(operator.is_, messages[:limit], before[:limit])):
            return chain[:limit]
        same = 0
        while same < limit and messages[same] is before[same]:
            same += 1
        return chain[:same]

    def _keep(
        self, key: SessionKey, messages: Sequence[Message], digests: list[str], reused: int
    ) -> list[str]:
        self.hashed += len(messages) - reused
        self._kept[key] = (list(messages), digests)
        while len(self._kept) > self.sessions:
            self._kept.popitem(last=False)
        return list(digests)


def _extended(reused: list[str], messages: Sequence[Message]) -> list[str]:
    """The chained digests of `messages`, the first `len(reused)` given."""
    if not reused:
        return chained_digests(messages, digests=seen_messages().digests(messages))
    digests, last = list(reused), reused[-1]
    for digest in seen_messages().digests(messages[len(reused) :]):
        last = chain_digest(last, digest)
        digests.append(last)
    return digests


def _origins(turn: Turn) -> Sources:
    """The client position each message of the turn's view holds verbatim."""
    sources = turn.sources
    if sources is None:  # a checkpoint stored before checkpoints recorded their sources
        replaced = turn.view[: turn.replacement_len]
        sources = aligned_sources(replaced, turn.messages[: turn.prefix_len])
    return view_sources(sources, turn.replacement_len, turn.prefix_len, len(turn.view))


def _with_handles(turn: Turn, result: list[Message], replaced: Replacement) -> list[Message]:
    """The result with the handles of every client message it replaces written in."""
    positions = replaced_positions(len(turn.messages), replaced.sources)
    return with_handles(result, replaced.sources, positions, turn.messages)


def _clip_labels(result: CompressionResult, origins: Sources) -> tuple[str, ...]:
    """What the result clipped: the client position (or `v` and the view position of a message
    ctxgate wrote), the tokens kept and the original's."""
    labels = []
    for clip in result.clipped:
        at = origins[clip.index] if clip.index < len(origins) else None
        where = f"m{at}" if at is not None else f"v{clip.index}"
        labels.append(f"{where}:{clip.kept_tokens}/{clip.original_tokens}")
    return tuple(labels)


def _plain(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], list(messages))
