"""Waiting, between turns, for the session's background compression to land.

ctxgate compresses in the background after a response; when the compression lands, counted in
turns, would otherwise depend on how fast the machine is: a real agent's turn takes seconds (the
model thinks, tools run), so its background compression has normally landed before the next
request, while a replay's turns are milliseconds apart. Before each next turn the replay asks
`GET /admin/sessions/{scope}/{id}/activity` until the session is `idle` (no background
compression pending or running), bounded by a timeout after which it goes on and counts the
wait as timed out. It polls every few milliseconds at first, backing off, so that the polling
does not load the machine it measures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote

import httpx

AWAIT_TIMEOUT_S = 30.0
FIRST_POLL_S = 0.005
POLL_GROWTH = 1.5
MAX_POLL_S = 0.05


@dataclass(frozen=True)
class Wait:
    """One wait before a turn: what the session was doing when first asked, how long the
    harness waited, and whether it gave up."""

    first: str  # idle | pending | running
    seconds: float
    timed_out: bool = False

    @property
    def waited(self) -> bool:
        return self.first != "idle"


@dataclass
class CompressionWaiter:
    http: httpx.Client
    root: str  # ctxgate's base URL, without /v1
    admin_key: str
    scope: str
    session_id: str
    timeout_s: float = AWAIT_TIMEOUT_S

    @property
    def url(self) -> str:
        key = quote(self.session_id, safe="")
        return f"{self.root}/admin/sessions/{quote(self.scope, safe='')}/{key}/activity"

    def state(self) -> str:
        answer = self.http.get(self.url, headers={"authorization": f"Bearer {self.admin_key}"})
        answer.raise_for_status()
        return str(answer.json()["background"])

    def wait(self) -> Wait:
        """Until the session is idle, or the timeout has passed."""
        started = time.monotonic()
        first = state = self.state()
        pause = FIRST_POLL_S
        while state != "idle":
            if time.monotonic() - started >= self.timeout_s:
                return Wait(first, time.monotonic() - started, timed_out=True)
            time.sleep(pause)
            pause = min(pause * POLL_GROWTH, MAX_POLL_S)
            state = self.state()
        return Wait(first, time.monotonic() - started)
