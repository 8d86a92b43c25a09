"""Reading ahead to a stream's first event, on real httpx responses with scripted bodies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.doors.chat.chat_door import ChatWatch
from proxy.doors.streaming import StreamRelay, error_status

OVERFLOW = (
    b'{"error":{"message":"This endpoint\'s maximum context length is 8192 tokens. However, '
    b'you requested about 9000 tokens.","code":400}}'
)
CHUNK = b'{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}'


class Pieces(httpx.AsyncByteStream):
    """A response body arriving as `pieces`, `pause_s` apart."""

    def __init__(self, pieces: list[bytes], pause_s: float = 0.0) -> None:
        self.pieces = pieces
        self.pause_s = pause_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await asyncio.sleep(self.pause_s)
            yield piece


def relay_of(pieces: list[bytes], pause_s: float = 0.0) -> StreamRelay:
    response = httpx.Response(200, stream=Pieces(pieces, pause_s))
    return StreamRelay(response, ChatWatch(hide_usage=False))


async def relayed(relay: StreamRelay) -> bytes:
    return b"".join([chunk async for chunk in relay.events()])


async def test_the_first_data_event_is_read_past_opening_comments() -> None:
    body = [b": OPENROUTER PROCESSING\n\n", b"data: " + OVERFLOW + b"\n\n"]
    relay = relay_of(body)
    assert await relay.first_event() == OVERFLOW
    assert error_status(OVERFLOW) == 400


async def test_comments_past_the_budget_commit_the_stream_and_nothing_is_lost() -> None:
    body = [b": keep-alive\n\n", b": keep-alive\n\n", b"data: " + CHUNK + b"\n\n"]
    body.append(b"data: [DONE]\n\n")
    relay = relay_of(body, pause_s=0.05)
    assert await relay.first_event(comments_s=0.02) == b""
    assert await relayed(relay) == b"".join(body)
    assert relay.failed is None


async def test_an_event_split_across_pieces_is_reassembled_and_relayed_once() -> None:
    event = b"data: " + CHUNK + b"\n\n"
    body = [event[:10], event[10:], b"data: [DONE]\n\n"]
    relay = relay_of(body)
    assert await relay.first_event() == CHUNK
    assert await relayed(relay) == event + b"data: [DONE]\n\n"


async def test_an_empty_stream_has_no_first_event() -> None:
    relay = relay_of([])
    assert await relay.first_event() is None
    assert b"error" in await relayed(relay)
    assert relay.failed is not None


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (OVERFLOW, 400),
        (b'{"type":"error","error":{"type":"invalid_request_error","message":"too long"}}', 400),
        (b'{"object":"error","message":"too long","code":400}', 400),
        (b'{"error":{"message":"overloaded","code":503}}', 503),
        (CHUNK, None),
        (b'{"choices":[{"delta":{"content":"an error was found"}}]}', None),
        (b"[DONE]", None),
    ],
)
def test_error_status_of_event_data(data: bytes, status: int | None) -> None:
    assert error_status(data) == status


@pytest.mark.parametrize(
    "error",
    [
        b'{"error":{"message":"overloaded","type":"server_error"}}',
        b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        b'{"object":"error","message":"engine died","code":500}',
    ],
)
async def test_an_error_event_after_the_first_fails_the_stream_in_every_shape(
    error: bytes,
) -> None:
    body = [b"data: " + CHUNK + b"\n\n", b"data: " + error + b"\n\n"]
    relay = relay_of(body)
    assert await relay.first_event() == CHUNK
    assert await relayed(relay) == b"".join(body)
    assert relay.failed == "upstream sent an error event"


async def test_events_without_markers_pass_untouched_whatever_the_piece_boundaries() -> None:
    events = [b"data: " + CHUNK + b"\n\n" for _ in range(5)]
    events.append(b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n')
    events.append(b"data: [DONE]\n\n")
    whole = b"".join(events)
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    relay = relay_of(pieces)
    assert await relayed(relay) == whole
    assert relay.watch.usage is not None and relay.watch.usage.prompt_tokens == 7
    assert relay.watch.finished and relay.failed is None


async def test_a_usage_chunk_ctxgate_asked_for_is_kept_from_the_client() -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
    body = [b"data: " + CHUNK + b"\n\n" + usage, b"data: [DONE]\n\n"]
    response = httpx.Response(200, stream=Pieces(body))
    relay = StreamRelay(response, ChatWatch(hide_usage=True))
    assert await relayed(relay) == b"data: " + CHUNK + b"\n\ndata: [DONE]\n\n"
    assert relay.watch.usage is not None and relay.watch.usage.completion_tokens == 2


class RecordingWatch(ChatWatch):
    """A chat watch that notes the data of every event it is shown."""

    def __init__(self) -> None:
        super().__init__(hide_usage=False)
        self.shown: list[bytes] = []

    def inspect(self, data: bytes) -> bool:
        self.shown.append(data)
        return super().inspect(data)


_EVENT_DATA = st.sampled_from(
    [
        CHUNK,
        b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}',
        b'{"choices":[{"index":0,"delta":{"content":"an error?"},"finish_reason":null}]}',
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(_EVENT_DATA, min_size=1, max_size=12),
    separators=st.lists(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]), min_size=1),
    cuts=st.lists(st.integers(min_value=1, max_value=40), min_size=1),
)
def test_only_events_holding_a_marker_are_shown_to_the_watch(
    data: list[bytes], separators: list[bytes], cuts: list[int]
) -> None:
    events = [b"data: " + d + separators[i % len(separators)] for i, d in enumerate(data)] + [
        b"data: [DONE]\n\n"
    ]
    whole = b"".join(events)
    pieces, at = [], 0
    while at < len(whole):
        width = cuts[len(pieces) % len(cuts)]
        pieces.append(whole[at : at + width])
        at += width
    watch = RecordingWatch()
    relay = StreamRelay(httpx.Response(200, stream=Pieces(pieces)), watch)
    assert asyncio.run(relayed(relay)) == whole
    marked = [d for d in [*data, b"[DONE]"] if any(m in d for m in watch.markers)]
    assert watch.shown == marked
    assert watch.finished and relay.failed is None
