"""What this process knows about each model: its window, its tokenizer, how far ctxgate's
count is from the provider's, and the limits the engine sets for it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from compression import (
    Calibration,
    CompressorOptions,
    ContextEngine,
    Limits,
    TokenCounter,
    counter_for_model,
    engine_limits,
)
from session.config.settings import ModelRule, Settings
from session.turn import Turn, reservation
from storage import SessionStore, StorageError

log = logging.getLogger("ctxgate.models")


class Models:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        engine: ContextEngine,
        windows: dict[str, int],
    ) -> None:
        self.settings = settings
        self.store = store
        self.engine = engine
        self.windows = windows  # learned from overflow errors, persisted
        self.calibrations: dict[str, Calibration] = {}
        # For an engine without limits of its own: the thresholds the config sets.
        self._defaults: CompressorOptions = settings.compression.compressor
        self._limits: dict[tuple[int, int | None], Limits] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def counter(self, rule: ModelRule, model: str) -> TokenCounter:
        return counter_for_model(
            model, encoding=rule.encoding, encodings_dir=self.settings.tokens.encodings_dir
        )

    def calibration(self, model: str) -> Calibration:
        return self.calibrations.get(model) or Calibration()

    def calibrate(self, model: str, real: int, estimate: int) -> None:
        """Learn from a provider's count `real` of a prompt ctxgate estimated at `estimate`
        (a calibrated figure, as every estimate ctxgate acts on). The sample is taken against
        the raw count it came from: against the calibrated one, each sample would pull the
        ratio back towards 1, settling at the square root of the true ratio."""
        calibration = self.calibration(model)
        raw = round(estimate / calibration.ratio) if calibration.samples else estimate
        self.calibrations[model] = calibration.observe(real, raw)

    def context_length(self, rule: ModelRule, model: str) -> int:
        """The configured window, or the smaller one a provider's error revealed."""
        learned = self.windows.get(model)
        return min(rule.context_length, learned or rule.context_length)

    def limits(self, context_length: int, max_output_tokens: int | None) -> Limits:
        """The engine's limits (memoised: a request asks more than once, and the answer
        depends on these two figures only)."""
        key = (context_length, max_output_tokens)
        found = self._limits.get(key)
        if found is None:
            found = engine_limits(self.engine, context_length, max_output_tokens, self._defaults)
            if len(self._limits) >= 4096:
                self._limits.clear()
            self._limits[key] = found
        return found

    def limits_of(self, turn: Turn) -> Limits:
        return self.limits(turn.context_length, reservation(turn))

    def summary_token_ratio(self, model: str) -> float | None:
        """Summary-model tokens per token we count, when the summary model is the request's
        own and its real usage calibrated our counter (otherwise the compressor falls back to
        a margin until the summary calls teach it)."""
        if self.settings.compression.summary.model not in ("auto", model):
            return None
        calibration = self.calibrations.get(model)
        return calibration.ratio if calibration is not None and calibration.samples else None

    def learn_window(self, model: str, window: int) -> None:
        self.windows[model] = window
        task = asyncio.get_running_loop().create_task(self._store_window(model, window))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store_window(self, model: str, window: int) -> None:
        try:
            await self.store.set_model_window(model, window)
        except StorageError as exc:
            log.warning("could not persist the learned window of %s: %s", model, exc)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
