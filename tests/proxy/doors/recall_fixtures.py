"""What the recall-tool door tests share: ctxgate's tool schema and a call to it, SSE bodies
split into events, and a stream of given events served by the simulator (a 200
`text/event-stream` answer holding those bytes), so the official SDKs read it over real HTTP."""

from __future__ import annotations

from collections.abc import Iterable

from compression.messages.types import ToolSchema
from compression.summary.handles import RECALL_TOOL
from tests.simulator import Fail, Simulator

RECALL: ToolSchema = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL,
        "description": "Read an archived message back by its handle.",
        "parameters": {
            "type": "object",
            "properties": {"handle": {"type": "string"}},
            "required": ["handle"],
        },
    },
}
RECALL_CALL = {"name": RECALL_TOOL, "arguments": {"handle": "m3"}}

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
