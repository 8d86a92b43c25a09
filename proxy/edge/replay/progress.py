"""A one-line progress bar on stderr, rewritten in place (no dependency)."""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 24
MIN_INTERVAL_S = 0.1


def bar_line(head: str, label: str, step: int, steps: int, unit: str, elapsed: str) -> str:
    """`[head] label [####----] step/steps unit  elapsed`, rewriting the terminal's line."""
    filled = WIDTH * step // max(steps, 1)
    bar = "#" * filled + "-" * (WIDTH - filled)
    return f"\r[{head}] {label:<28} [{bar}] {step}/{steps} {unit}  {elapsed}\x1b[K"


class ProgressBar:
    def __init__(self, stream: TextIO, sessions: int) -> None:
        self.stream = stream
        self.sessions = sessions
        self.done = 0
        self.current = ""
        self.started = time.monotonic()
        self._last = 0.0

    def __call__(self, name: str, request: int, requests: int) -> None:
        if name != self.current:
            self.current = name
            self.done += 1
        now = time.monotonic()
        if now - self._last < MIN_INTERVAL_S and request < requests:
            return
        self._last = now
        head = f"replay {self.done}/{self.sessions}"
        elapsed = f"{now - self.started:.0f}s"
        self.stream.write(bar_line(head, name[:28], request, requests, "requests", elapsed))
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()
