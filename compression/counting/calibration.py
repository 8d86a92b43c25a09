"""Per-model calibration of token estimates against the upstream's real figures (pure).

tiktoken is exact for OpenAI models and only approximate for everything else (other
tokenizers, chat templates, tool-schema rendering). After each response the proxy knows the
real `usage.prompt_tokens` of a request it also estimated; the ratio of the two, smoothed, is
applied to later estimates:

    cal = Calibration.from_dict(stored)                  # or Calibration() for a new model
    cal = cal.observe(real_prompt_tokens=12_840, estimated_tokens=12_000)
    figure = anchor + cal.apply(estimate_of_new_messages)
    store(cal.to_dict())

Compare like with like: `estimated_tokens` must be the raw (uncalibrated) counter estimate of
exactly the prompt that was sent — messages and tool schemas — not an anchored figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

MIN_RATIO = 0.5
MAX_RATIO = 2.0
MIN_ESTIMATE = 200  # smaller prompts are dominated by fixed overheads: too noisy to learn from
DEFAULT_ALPHA = 0.2


def _clamp(value: float) -> float:
    return min(MAX_RATIO, max(MIN_RATIO, value))


@dataclass(frozen=True, slots=True)
class Calibration:
    """Exponential moving average of `real / estimated`, clamped to [0.5, 2.0].

    The first samples are averaged plainly (weight `1/n`) until that weight drops to `alpha`,
    so a new model converges after a few responses instead of creeping up from 1.0.
    """

    ratio: float = 1.0
    samples: int = 0
    alpha: float = DEFAULT_ALPHA

    def observe(self, real_prompt_tokens: int, estimated_tokens: int) -> Calibration:
        """A new calibration including this sample (unchanged if the sample is unusable)."""
        if estimated_tokens < MIN_ESTIMATE or real_prompt_tokens <= 0:
            return self
        sample = real_prompt_tokens / estimated_tokens
        if not math.isfinite(sample):
            return self
        weight = max(self.alpha, 1.0 / (self.samples + 1))
        ratio = self.ratio + weight * (_clamp(sample) - self.ratio)
        return replace(self, ratio=_clamp(ratio), samples=self.samples + 1)

    def apply(self, estimate: int) -> int:
        """The calibrated estimate; the estimate itself until a sample has been seen."""
        if self.samples == 0 or estimate <= 0:
            return estimate
        return round(estimate * self.ratio)

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "samples": self.samples, "alpha": self.alpha}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Calibration:
        """Inverse of `to_dict`; missing, malformed or out-of-range data gives safe values."""
        if not isinstance(data, Mapping):
            return cls()
        try:
            ratio = float(data.get("ratio", 1.0))
            samples = int(data.get("samples", 0))
            alpha = float(data.get("alpha", DEFAULT_ALPHA))
        except (TypeError, ValueError, OverflowError):
            return cls()
        if not math.isfinite(ratio) or samples <= 0:
            return cls(alpha=alpha if 0.0 < alpha <= 1.0 else DEFAULT_ALPHA)
        if not (math.isfinite(alpha) and 0.0 < alpha <= 1.0):
            alpha = DEFAULT_ALPHA
        return cls(ratio=_clamp(ratio), samples=samples, alpha=alpha)
