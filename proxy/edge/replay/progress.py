"""A one-line progress bar on stderr, rewritten in place (no dependency)."""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 24
MIN_INTERVAL_S = 0.1


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
        filled = WIDTH * request // max(requests, 1)
        bar = "#" * filled + "-" * (WIDTH - filled)
        self.stream.write(
            f"\r[replay {self.done}/{self.sessions}] {name[:28]:<28} [{bar}] "
            f"{request}/{requests} requests  {now - self.started:.0f}s\x1b[K"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()
