"""Per-session bookkeeping around each request: the view in, the usage out, the triggers.

turn = await conversations.prepare(ident, request, rule, headers)   # view + sync triggers
... forward turn.view upstream ...
conversations.after_response(turn, usage)   # usage write-behind, post-response trigger
await conversations.recover(turn, overflow)  # an overflow error: forced compression
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from compression.calibration import Calibration
from compression.engine import EngineState, Summarizer, TokenCounter
from compression.options import CompressorOptions
from compression.state import blocked_reason, record_real_usage
from compression.thresholds import Limits, limits_for
from compression.tokens import counter_for_model
from compression.types import Message
from proxy.compaction import Attempt, Compactor
from proxy.doors import summary_door
from proxy.frontdoor import FrontDoor, Usage, WireRequest
from proxy.headers import upstream_request_headers
from proxy.identity import Identity
from proxy.overflow import Overflow
from proxy.pressure import decide, estimate_view
from proxy.settings import ModelRule, Settings
from proxy.summarizer import UpstreamSummarizer, summary_route
from proxy.turn import Turn
from proxy.upstream import Upstream
from storage import SessionKey, SessionRecord, SessionStore, StorageError, UsageRecord

log = logging.getLogger("ctxgate.conversations")

_MAX_CHILD_HOPS = 64
_REMEMBERED_TURNS = 2048
_MIN_MAX_TOKENS = 16
# The client's credential travels with the summary call when no upstream key replaces it.
_SUMMARY_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "anthropic-version"})


class Conversations:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        compactor: Compactor,
        upstreams: Mapping[str, Upstream],
        trigger_options: CompressorOptions,
        windows: dict[str, int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.compactor = compactor
        self.upstreams = upstreams
        self.options = trigger_options
        self.windows = windows
        self.clock = clock
        self.calibrations: dict[str, Calibration] = {}
        self.jobs: dict[SessionKey, asyncio.Task[None]] = {}
        self.last_turns: OrderedDict[SessionKey, Turn] = OrderedDict()
        self._committed_at: OrderedDict[SessionKey, float] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- helpers -------------------------------------------------------------------------
    def counter(self, rule: ModelRule, model: str) -> TokenCounter:
        return counter_for_model(
            model, encoding=rule.encoding, encodings_dir=self.settings.tokens.encodings_dir
        )

    def calibration(self, model: str) -> Calibration:
        return self.calibrations.get(model) or Calibration()

    def limits(self, turn: Turn) -> Limits:
        return limits_for(
            self.options,
            turn.context_length,
            turn.max_tokens or turn.request.max_tokens or turn.rule.max_output_tokens,
        )

    def summarizer(self, turn: Turn) -> Summarizer:
        summary = self.settings.compression.summary
        upstream, model = summary_route(
            summary, self.upstreams, turn.rule.upstream, turn.request.model
        )
        forwarded = [(k, v) for k, v in turn.client_headers.items() if k in _SUMMARY_HEADERS]
        headers = upstream_request_headers(forwarded, upstream.settings)
        door = summary_door(upstream.settings.apis, turn.door)
        timeout_s = self.settings.compression.summary.timeout_s
        return UpstreamSummarizer(upstream, door, model, headers, timeout_s)

    def summary_token_ratio(self, turn: Turn) -> float | None:
        """Summary-model tokens per token we count, when the summary model is the request's
        own and its real usage calibrated our counter (otherwise the compressor falls back to
        a margin until the summary calls teach it)."""
        model = self.settings.compression.summary.model
        if model not in ("auto", turn.request.model):
            return None
        calibration = self.calibrations.get(turn.request.model)
        return calibration.ratio if calibration is not None and calibration.samples else None

    async def _compress(
        self,
        turn: Turn,
        trigger: str,
        *,
        force: bool = False,
        focus: str | None = None,
        current_tokens: int | None = None,
    ) -> Attempt:
        return await self.compactor.compress(
            turn,
            trigger=trigger,
            counter=self.counter(turn.rule, turn.request.model),
            summarize=self.summarizer(turn),
            force=force,
            focus=focus,
            current_tokens=current_tokens,
            summary_token_ratio=self.summary_token_ratio(turn),
        )

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _session(self, key: SessionKey) -> tuple[SessionKey, SessionRecord | None]:
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

    # ---- request path --------------------------------------------------------------------
    async def prepare(
        self,
        door: FrontDoor,
        ident: Identity,
        request: WireRequest,
        rule: ModelRule,
        headers: Mapping[str, str],
    ) -> Turn:
        key, session = await self._session(SessionKey(ident.scope, ident.session_id))
        learned = self.windows.get(request.model)
        turn = Turn(
            door=door,
            ident=ident,
            key=key,
            request=request,
            rule=rule,
            upstream=self.upstreams[rule.upstream],
            client_headers=headers,
            session=session,
            state=EngineState.from_json(session.engine_state if session else None),
            context_length=min(rule.context_length, learned or rule.context_length),
            view=request.messages,
            started_at=self.clock(),
        )
        if request.passthrough:
            return turn  # the history lives on the provider: nothing here to compress
        if session is not None and session.compression_count > 0:
            await self.compactor.apply_checkpoint(turn)
        last = self.last_turns.get(key)
        if last is not None:
            turn.anchored = _extends(turn.view, last.view)
        await self._arrival_triggers(turn)
        return turn

    async def _arrival_triggers(self, turn: Turn) -> None:
        counter = self.counter(turn.rule, turn.request.model)
        calibration = self.calibration(turn.request.model)
        limits = self.limits(turn)
        decision, pressure = decide(
            turn,
            limits,
            counter,
            calibration,
            now=self.clock(),
            background=self.settings.compression.background,
        )
        if decision == "hygiene" and await self._await_job(turn.key):
            await self.compactor.apply_checkpoint(turn)
            turn.estimate = None
            decision, pressure = decide(
                turn, limits, counter, calibration, now=self.clock(), background=True
            )
        if decision == "none":
            return
        await self._compress(turn, decision, current_tokens=pressure.tokens if pressure else None)

    async def _await_job(self, key: SessionKey) -> bool:
        """Wait (bounded) for this session's background compression; True if there was one."""
        job = self.jobs.get(key)
        if job is None:
            return False
        try:
            await asyncio.wait_for(
                asyncio.shield(job), timeout=self.settings.compression.background_wait_s
            )
        except (TimeoutError, Exception):  # the job logs its own failures
            pass
        return True

    # ---- overflow recovery ---------------------------------------------------------------
    async def recover(self, turn: Turn, overflow: Overflow, body_bytes: int) -> str | None:
        """Make the next attempt fit; None when it may be retried, else the reason it cannot."""
        if overflow.window and overflow.window < turn.context_length:
            self._learn_window(turn, overflow.window)
        requested = turn.max_tokens or turn.request.max_tokens
        if requested and overflow.window and overflow.prompt_tokens is not None:
            room = overflow.window - overflow.prompt_tokens
            if 0 < room < requested and (overflow.kind == "prompt_plus_output" or room > 0):
                if room >= _MIN_MAX_TOKENS:
                    turn.max_tokens = room - max(1, room // 50)
                    return None
        counter = self.counter(turn.rule, turn.request.model)
        before_messages = len(turn.view)
        before_tokens = estimate_view(turn, counter, self.calibration(turn.request.model))
        attempt = await self._compress(
            turn, "overflow", force=True, current_tokens=overflow.prompt_tokens
        )
        if not attempt.changed:
            return f"forced compression did not succeed ({attempt.outcome}: {attempt.error})"
        after_tokens = estimate_view(turn, counter, self.calibration(turn.request.model))
        if overflow.kind == "bytes":
            progressed = len(turn.upstream_body()) < body_bytes * 0.95
        else:
            progressed = len(turn.view) < before_messages or after_tokens < before_tokens * 0.95
        return None if progressed else "forced compression made no progress"

    def _learn_window(self, turn: Turn, window: int) -> None:
        self.windows[turn.request.model] = window
        turn.context_length = window
        turn.estimate = None
        self._spawn(self._store_window(turn.request.model, window))

    async def _store_window(self, model: str, window: int) -> None:
        try:
            await self.store.set_model_window(model, window)
        except StorageError as exc:
            log.warning("could not persist the learned window of %s: %s", model, exc)

    # ---- after the response --------------------------------------------------------------
    def after_response(self, turn: Turn, usage: Usage | None) -> None:
        """Record usage (write-behind) and start a background compression when due."""
        if turn.request.passthrough:
            return
        model = turn.request.model
        real = usage.prompt_tokens if usage else None
        completion = usage.completion_tokens if usage else None
        if real is not None and turn.estimate:
            self.calibrations[model] = self.calibration(model).observe(real, turn.estimate)
        prompt = real
        if prompt is None:
            counter = self.counter(turn.rule, model)
            prompt = estimate_view(turn, counter, self.calibration(model))
        self.store.record_usage_later(
            UsageRecord(
                sk=turn.key,
                model=model,
                prompt_tokens=prompt,
                completion_tokens=completion or 0,
                message_count=len(turn.view),
                at=turn.started_at,
                estimated=real is None,
            )
        )
        self._remember(turn)
        if real is None:
            return
        limits = self.limits(turn)
        self._judge(turn, real, limits)
        if turn.notes or self._committed_at.get(turn.key, 0.0) > turn.started_at:
            # Compressed on the way in (its real figure judges it), or the view predates a
            # newer compression of the session: compressing it again would thrash.
            return
        if (
            self.settings.compression.background
            and real >= limits.threshold
            and blocked_reason(turn.state, self.clock()) is None
            and turn.key not in self.jobs
        ):
            self._start_job(turn, real)

    def _judge(self, turn: Turn, prompt: int, limits: Limits) -> None:
        state = record_real_usage(turn.state, prompt, limits.threshold, self.clock())
        if state != turn.state:
            turn.state = state
            self._spawn(self._save_state(turn.key, state))

    async def _save_state(self, key: SessionKey, state: EngineState) -> None:
        try:
            await self.store.save_engine_state(key, state.to_json())
        except StorageError as exc:
            log.warning("could not save engine state: %s", exc)

    def _remember(self, turn: Turn) -> None:
        self.last_turns[turn.key] = turn
        self.last_turns.move_to_end(turn.key)
        while len(self.last_turns) > _REMEMBERED_TURNS:
            self.last_turns.popitem(last=False)

    def _start_job(self, turn: Turn, prompt: int) -> None:
        job_turn = replace(turn, notes=[], estimate=None)
        task = self._spawn(self._background(job_turn, prompt))
        self.jobs[turn.key] = task
        key = turn.key
        task.add_done_callback(lambda _task: self.jobs.pop(key, None))

    async def _background(self, turn: Turn, prompt: int) -> None:
        try:
            attempt = await self._compress(turn, "post_response", current_tokens=prompt)
            if attempt.changed:
                self._mark_committed(turn.key)
        except Exception:
            log.exception("background compression failed for session %s", turn.key.key)

    async def compress_now(self, key: SessionKey, focus: str | None) -> tuple[Turn, Attempt] | None:
        """The manual trigger: compress the session's most recent view now."""
        last = self.last_turns.get(key)
        if last is None:
            return None
        turn = replace(last, notes=[], estimate=None)
        attempt = await self._compress(turn, "manual", force=True, focus=focus)
        if attempt.changed:
            self._mark_committed(turn.key)
        return turn, attempt

    def _mark_committed(self, key: SessionKey) -> None:
        self._committed_at[key] = self.clock()
        self._committed_at.move_to_end(key)
        while len(self._committed_at) > _REMEMBERED_TURNS:
            self._committed_at.popitem(last=False)

    def forget(self, key: SessionKey) -> None:
        """Drop what this process remembers of a deleted session; cancel its background job."""
        self.last_turns.pop(key, None)
        self._committed_at.pop(key, None)
        job = self.jobs.pop(key, None)
        if job is not None:
            job.cancel()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _extends(view: list[Message], earlier: list[Message]) -> bool:
    """Whether `view` continues `earlier` (an edit, a fork or a new checkpoint breaks it).

    Comparing the first and the last message of `earlier` is enough in practice and costs two
    dict comparisons instead of a pass over the history.
    """
    n = len(earlier)
    return len(view) >= n > 0 and view[0] == earlier[0] and view[n - 1] == earlier[-1]
