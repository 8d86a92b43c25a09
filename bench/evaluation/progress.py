"""A one-line progress bar on stderr (no dependency): rewritten in place on a terminal, one
line per finished replay otherwise (CI logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from proxy.edge.replay.progress import bar_line

MIN_INTERVAL_S = 0.2


class Progress:
    def __init__(self, replays: int, *, enabled: bool = True, stream: TextIO | None = None):
        self.replays = replays
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = 0
        self.label = ""
        self.started = time.monotonic()
        self._last = 0.0

    def start(self, label: str) -> None:
        self.label = label
        self._last = 0.0

    def update(self, turn: int, turns: int) -> None:
        now = time.monotonic()
        if not (self.enabled and self.tty) or (now - self._last < MIN_INTERVAL_S and turn < turns):
            return
        self._last = now
        head = f"eval {self.done + 1}/{self.replays}"
        self.stream.write(bar_line(head, self.label, turn, turns, "turns", self._elapsed()))
        self.stream.flush()

    def finish_replay(self, note: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        line = f"[eval {self.done}/{self.replays}] {self.label:<28} done {note} {self._elapsed()}"
        self.stream.write(("\r" + line + "\x1b[K\n") if self.tty else line + "\n")
        self.stream.flush()

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"
