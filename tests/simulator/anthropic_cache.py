"""Prompt caching as the Messages API bills it: each ``cache_control`` breakpoint names the
prefix up to and including its block; a prefix an earlier request with the same API key wrote
is read from the cache, the rest up to the last breakpoint is written, and what follows the last
breakpoint is plain input."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .anthropic_prompt import Prompt, prefix_hashes


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
        marks = [(int(n * factor), h) for n, h in prefix_hashes(model, prompt)]
        marks = [(n, h) for n, h in marks if n >= minimum]
        if not marks:
            return CacheUsage(total, 0, 0)
        with self._lock:
            written = self._written.setdefault(key, set())
            read = max((n for n, h in marks if h in written), default=0)
            if write:
                written.update(h for _, h in marks)
        last = marks[-1][0]
        return CacheUsage(total - last, last - read, read)
