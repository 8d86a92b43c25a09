"""Prompt caching as the Messages API bills it: each ``cache_control`` breakpoint names the
prefix up to and including its block; a prefix an earlier request with the same API key wrote
is read from the cache (also when it ends at one of the 20 blocks before a breakpoint), the rest
up to the last breakpoint is written, and what follows the last breakpoint is plain input."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .anthropic_prompt import Prompt, prefix_hashes

LOOKBACK_BLOCKS = 20


@dataclass(frozen=True, slots=True)
class CacheUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


class PromptCache:
    """The prefixes written so far, per API key (the provider's cache is per organisation;
    one key stands for one here). Entries never expire within a simulator's life."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[str, set[str]] = {}

    def clear(self) -> None:
        with self._lock:
            self._written.clear()

    def peek(self, key: str, model: str, prompt: Prompt, factor: float, minimum: int) -> CacheUsage:
        """The split this request would be billed, without writing anything."""
        return self._split(key, model, prompt, factor, minimum, write=False)

    def use(self, key: str, model: str, prompt: Prompt, factor: float, minimum: int) -> CacheUsage:
        """Bill the request and write its breakpoint prefixes."""
        return self._split(key, model, prompt, factor, minimum, write=True)

    def _split(
        self, key: str, model: str, prompt: Prompt, factor: float, minimum: int, *, write: bool
    ) -> CacheUsage:
        total = int(prompt.total * factor)
        # A prefix shorter than the model's minimum cacheable length is not cached at all.
        bounds = [(int(n * factor), h, mark) for n, h, mark in prefix_hashes(model, prompt)]
        marks = [i for i, (n, _, mark) in enumerate(bounds) if mark and n >= minimum]
        if not marks:
            return CacheUsage(total, 0, 0)
        # Each breakpoint also finds what earlier requests wrote at any of the block boundaries
        # up to LOOKBACK_BLOCKS before it (so a breakpoint that moved on to the newest message
        # still reads the previous turn's prefix).
        near = {j for i in marks for j in range(max(0, i - LOOKBACK_BLOCKS), i + 1)}
        with self._lock:
            written = self._written.setdefault(key, set())
            read = max((bounds[j][0] for j in near if bounds[j][1] in written), default=0)
            if write:
                written.update(bounds[i][1] for i in marks)
        last = bounds[marks[-1]][0]
        return CacheUsage(total - last, last - read, read)
