"""Each request's way through its session: the view in, the usage out, the compressions.

    turn = await conversations.prepare(door, ident, request, rule, headers)  # view + triggers
    ... forward turn.view upstream ...
    conversations.after_response(turn, usage)        # usage write-behind, background trigger
    turn, reason = await conversations.recover(turn, overflow, attempts, body_bytes)

What to do is decided by `session.policy.decide`; this module gathers the event it needs,
carries out the action it returns and hands back the new turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from compression import Calibration, EngineState, Summarizer, TokenCounter, record_real_usage
from session.compaction import Applied, Compactor, Scheduled
from session.config.settings import ModelRule, Settings
from session.identity import Identity
from session.ledger.book import Ledger
from session.memory import Lineages, Sessions
from session.models import Models
from session.overflow import Overflow
from session.policy import (
    Action,
    Answered,
    Arrival,
    Asked,
    AwaitJob,
    Compress,
    Event,
    GiveUp,
    LowerMaxTokens,
    Refused,
    Rules,
    decide,
    probed_window,
)
from session.ports.frontdoor import DoorChooser, FrontDoor, Usage, WireRequest
from session.ports.headers import upstream_request_headers
from session.ports.upstream import Upstream
from session.pressure import estimate_view, measured, surely_small
from session.summarizer import UpstreamSummarizer, summary_route
from session.turn import Turn
from storage import PROMPT_TOKENS_PENDING, SessionKey, SessionStore, StorageError, UsageRecord

log = logging.getLogger("ctxgate.conversations")

# The client's credential travels with the summary call when no upstream key replaces it.
_SUMMARY_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "anthropic-version"})


class Conversations:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        compactor: Compactor,
        upstreams: Mapping[str, Upstream],
        models: Models,
        sessions: Sessions,
        clock: Callable[[], float],
        summary_door: DoorChooser,
        ledger: Ledger | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.compactor = compactor
        self.upstreams = upstreams
        self.models = models
        self.sessions = sessions
        self.clock = clock
        self.summary_door = summary_door
        self.ledger = ledger  # summary calls' charges
        self.lineages = Lineages(store, sessions.tips)
        c = settings.compression
        self.rules = Rules(background=c.background, max_attempts=c.max_attempts)

    # ---- request path --------------------------------------------------------------------
    async def prepare(
        self,
        door: FrontDoor,
        ident: Identity,
        request: WireRequest,
        rule: ModelRule,
        headers: Mapping[str, str],
        compression_off: bool = False,
    ) -> Turn:
        """The request's turn: its session's checkpoint applied and any compression due made,
        unless compression is off for the session (then its view is the client's messages)."""
        key, session = await self.sessions.lookup(SessionKey(ident.scope, ident.session_id))
        mark = None if request.passthrough else self.sessions.marks.get(key)
        turn = Turn(
            ident=ident,
            key=key,
            door=door,
            request=request,
            rule=rule,
            upstream=self.upstreams[rule.upstream],
            client_headers=headers,
            session=session,
            state=EngineState.from_json(session.engine_state if session else None),
            context_length=self.models.context_length(rule, request.model),
            view=request.messages,
            started_at=self.clock(),
            # Without a checkpoint the view is the client's messages: judged here, it saves
            # remaking the turn (a `replace` costs more than the comparison).
            anchored=mark is None or mark.continued_by(request.messages),
        )
        if request.passthrough:
            return turn  # the history lives on the provider: nothing here to compress
        if compression_off:
            return replace(turn, compression_off=True)
        if session is not None and session.compression_count > 0:
            turn = await self.lineages.placed(await self.compactor.apply_checkpoint(turn))
            if turn.key != key:  # another lineage: its own last view
                mark = self.sessions.marks.get(turn.key)
                turn = replace(turn, anchored=mark is None or mark.continued_by(turn.view))
            elif mark is not None and turn.view is not request.messages:
                turn = replace(turn, anchored=mark.continued_by(turn.view))
        return await self._on_arrival(turn)

    async def _on_arrival(self, turn: Turn, after_job: bool = False) -> Turn:
        limits = self.models.limits_of(turn)
        tokens: int | None = None
        exact = False
        if len(turn.view) < limits.hygiene_messages and not surely_small(turn, limits):
            pool = self.compactor.pool
            offload = pool.call if pool is not None else None
            pieces = pool.size if pool is not None else 1
            pressure = await measured(turn, *self._counting(turn), offload, pieces)
            tokens, exact = pressure.tokens, pressure.exact
            if pressure.estimate is not None:
                turn = replace(turn, estimate=pressure.estimate)
        session = turn.session
        event = Arrival(
            tokens=tokens,
            exact=exact,
            messages=len(turn.view),
            pending=session is not None and session.last_prompt_tokens == PROMPT_TOKENS_PENDING,
            job_running=turn.key in self.sessions.jobs,
            after_job=after_job,
        )
        action = decide(event, limits, turn.state, now=self.clock(), rules=self.rules)
        if isinstance(action, AwaitJob):
            await self.sessions.await_job(turn.key, self.settings.compression.background_wait_s)
            turn = await self.compactor.apply_checkpoint(turn)
            return await self._on_arrival(turn, after_job=True)
        if isinstance(action, Compress):
            if turn.state.requested_at:
                # Asked for once: the request runs it whatever comes of it.
                done = replace(turn.state, requested_at=0.0, requested_focus=None)
                turn = replace(turn, state=done)
            return (await self._compress(turn, action)).turn
        return turn

    def _decide(self, event: Event, turn: Turn) -> Action:
        return decide(
            event, self.models.limits_of(turn), turn.state, now=self.clock(), rules=self.rules
        )

    def _counting(self, turn: Turn) -> tuple[TokenCounter, Calibration]:
        model = turn.request.model
        return self.models.counter(turn.rule, model), self.models.calibration(model)

    # ---- compressing ---------------------------------------------------------------------
    def summarizer(self, turn: Turn) -> Summarizer:
        summary = self.settings.compression.summary
        upstream, model = summary_route(
            summary, self.upstreams, turn.rule.upstream, turn.request.model
        )
        forwarded = [(k, v) for k, v in turn.client_headers.items() if k in _SUMMARY_HEADERS]
        headers = upstream_request_headers(forwarded, upstream.settings)
        door = self.summary_door(upstream.settings.apis, turn.door)
        ledger, spawn = self.ledger, self.sessions.spawn

        async def charge(usage: Usage | None) -> None:
            if ledger is not None:  # recorded beside the compression, not in its way
                spawn(ledger.overhead(turn.key, model, "summary", usage))

        return UpstreamSummarizer(upstream, door, model, headers, summary.timeout_s, charge)

    async def _compress(self, turn: Turn, action: Compress) -> Applied:
        model = turn.request.model
        return await self.compactor.compress(
            turn,
            trigger=action.trigger,
            counter=self.models.counter(turn.rule, model),
            summarize=self.summarizer(turn),
            force=action.force,
            focus=action.focus,
            current_tokens=action.current_tokens,
            summary_token_ratio=self.models.summary_token_ratio(model),
            summary_context_length=self.settings.compression.summary.context_length,
        )

    # ---- overflow recovery ---------------------------------------------------------------
    async def recover(
        self, turn: Turn, overflow: Overflow, attempts: int, body_bytes: int
    ) -> tuple[Turn, str | None]:
        """The turn to retry with, and None; or the reason no retry can fit."""
        if turn.request.passthrough:
            # Most of the prompt is on the provider: nothing to shrink, nothing to learn from.
            return turn, f"forwarded untouched ({turn.request.passthrough})"
        if overflow.prompt_tokens is not None and overflow.kind != "bytes":
            # The provider's own count of the prompt it refused: the calibration learns from
            # it as from an answer's usage, so the retry is sized in the provider's tokens.
            estimate = estimate_view(turn, *self._counting(turn))
            self.models.calibrate(turn.request.model, overflow.prompt_tokens, estimate)
            turn = replace(turn, estimate=None)
        window = overflow.window
        if window is None:
            failing = overflow.prompt_tokens or estimate_view(turn, *self._counting(turn))
            window = probed_window(failing, turn.context_length)
        if window and window < turn.context_length:
            self.models.learn_window(turn.request.model, window)
            turn = replace(turn, context_length=window, estimate=None)
        event = Refused(
            overflow, attempts, turn.max_tokens or turn.request.max_tokens, turn.compression_off
        )
        action = self._decide(event, turn)
        if isinstance(action, GiveUp):
            return turn, action.reason
        if isinstance(action, LowerMaxTokens):
            return replace(turn, max_tokens=action.max_tokens), None
        assert isinstance(action, Compress)
        counting = self._counting(turn)
        before_messages = len(turn.view)
        before_tokens = estimate_view(turn, *counting)
        applied = await self._compress(turn, action)
        if not applied.changed:
            reason = f"forced compression did not succeed ({applied.outcome}: {applied.error})"
            return applied.turn, reason
        after = applied.turn
        if overflow.kind == "bytes":
            progressed = len(after.upstream_body()) < body_bytes * 0.95
        else:
            after_tokens = estimate_view(after, *counting)
            progressed = len(after.view) < before_messages or after_tokens < before_tokens * 0.95
        return after, None if progressed else "forced compression made no progress"

    # ---- after the response --------------------------------------------------------------
    def after_response(self, turn: Turn, usage: Usage | None) -> None:
        """Record usage (write-behind) and start a background compression when due."""
        if turn.request.passthrough:
            return
        model = turn.request.model
        # The session's figure is its view's: passages recall before asking placed are not
        # part of it (a compression drops them, so they must not be what triggers one).
        real = usage.prompt_tokens if usage else None
        if real and turn.ahead_tokens:  # a provider's 0 is no count: left as it reported it
            real = max(1, real - turn.ahead_tokens)
        if real is not None and turn.estimate:
            self.models.calibrate(model, real, turn.estimate)
        prompt = real if real is not None else estimate_view(turn, *self._counting(turn))
        self.store.record_usage_later(
            UsageRecord(
                sk=turn.key,
                model=model,
                prompt_tokens=prompt,
                completion_tokens=(usage.completion_tokens if usage else None) or 0,
                message_count=len(turn.view),
                at=turn.started_at,
                estimated=real is None,
                tip_len=len(turn.messages) if turn.digests else None,
                tip_digest=turn.digests[-1] if turn.digests else None,
            )
        )
        self.sessions.remember(turn)
        if real is None:
            return
        limits = self.models.limits_of(turn)
        turn = self._judge(turn, real, limits.threshold)
        event = Answered(
            prompt_tokens=real,
            compressed_now=bool(turn.notes),
            superseded=self.sessions.committed_since(turn.key, turn.started_at),
            job_running=turn.key in self.sessions.jobs,
            compression_off=turn.compression_off,
        )
        action = decide(event, limits, turn.state, now=self.clock(), rules=self.rules)
        if isinstance(action, Compress):
            job = replace(turn, notes=(), estimate=None)
            self.sessions.start_job(turn.key, self._background(job, action), turn.root)

    def _judge(self, turn: Turn, prompt: int, threshold: int) -> Turn:
        """The engine state after a real figure (strikes, anti-thrash), saved when it moved."""
        state = record_real_usage(turn.state, prompt, threshold, self.clock())
        if state == turn.state:
            return turn
        self.sessions.spawn(self._save_state(turn.key, state.to_json()))
        return replace(turn, state=state)

    async def _save_state(self, key: SessionKey, state: dict[str, Any]) -> None:
        try:
            await self.store.save_engine_state(key, state)
        except StorageError as exc:
            log.warning("could not save engine state: %s", exc)

    async def _background(self, turn: Turn, action: Action) -> None:
        assert isinstance(action, Compress)
        try:
            applied = await self._compress(turn, action)
            if applied.changed:
                self.sessions.mark_committed(turn.key)
        except Exception:
            log.exception("background compression failed for session %s", turn.key.key)

    async def compress_now(self, key: SessionKey, focus: str | None) -> Applied | Scheduled | None:
        """The manual trigger: compress the session's latest view now when this process holds
        it, else ask (in the database) for a compression of its next request, on whatever
        replica serves it. None: no such session."""
        last = self.sessions.held_turn(key)
        if last is None:
            return await self._schedule(key, focus)
        turn = replace(last, notes=(), estimate=None)
        action = self._decide(Asked(focus), turn)
        assert isinstance(action, Compress)
        applied = await self._compress(turn, action)
        if applied.changed:
            self.sessions.mark_committed(turn.key)
        return applied

    async def _schedule(self, key: SessionKey, focus: str | None) -> Scheduled | None:
        key, session = await self.sessions.lookup(key)
        if session is None:
            return None
        state = EngineState.from_json(session.engine_state)
        asked = replace(state, requested_at=self.clock(), requested_focus=focus)
        await self.store.save_engine_state(key, asked.to_json())
        return Scheduled(key)

    async def close(self) -> None:
        await self.sessions.close()
        await self.models.close()
