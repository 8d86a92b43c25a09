"""Helpers of the recall-tool door tests: SSE bodies split into events, and a stream of given
events served by the simulator (a 200 `text/event-stream` answer holding those bytes), so the
official SDKs read it over real HTTP."""

from __future__ import annotations

from collections.abc import Iterable

from tests.simulator import Fail, Simulator

EVENT_STREAM = {"content-type": "text/event-stream"}


def split_events(body: bytes) -> list[bytes]:
    """Complete SSE events (each with its blank-line end) of a stream body."""
    return [chunk + b"\n\n" for chunk in body.split(b"\n\n") if chunk.strip()]


def event_data(event: bytes) -> bytes:
    return b"\n".join(
        line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:")
    )


def serve_events(sim: Simulator, events: Iterable[bytes]) -> None:
    """The simulator's next answer: exactly these events, as a stream."""
    sim.enqueue(Fail(status=200, body=b"".join(events), headers=EVENT_STREAM))
