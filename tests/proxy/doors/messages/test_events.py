"""Messages answers: usage figures, stream events, errors, overflow forms and summary calls."""

from __future__ import annotations

import json

import orjson
import pytest

from compression.engine import SummaryCall, SummaryCallError
from proxy.doors.messages.events import (
    MessagesWatch,
    answer_usage,
    error_body,
    error_event,
    error_status,
    summary_body,
    summary_reply,
)
from session.overflow import classify_overflow
from session.ports.frontdoor import Usage


def data(obj: object) -> bytes:
    return json.dumps(obj).encode()


START = data(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "usage": {
                "input_tokens": 12,
                "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 4000,
                "output_tokens": 1,
            },
        },
    }
)
DELTA = data(
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}
)
OVERFLOW = data(
    {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 20512 tokens > 16384 maximum",
        },
    }
)


def test_watch_sums_the_prompt_figure_and_sees_the_end() -> None:
    watch = MessagesWatch()
    assert watch.preamble(START) and watch.preamble(data({"type": "ping"}))
    assert not watch.preamble(DELTA)
    for event in (START, data({"type": "ping"}), b"", DELTA):
        assert watch.inspect(event)
    # The split by tier stays beside the sum (the ledger prices each tier).
    assert watch.usage == Usage(4312, 42, cache_read=4000, cache_write=300)
    assert not watch.finished
    watch.inspect(data({"type": "message_stop"}))
    assert watch.finished and watch.failed is None


def test_watch_notes_an_error_event() -> None:
    watch = MessagesWatch()
    watch.inspect(START)
    watch.inspect(OVERFLOW)
    assert watch.failed and watch.finished


def test_usage_of_a_whole_answer() -> None:
    answer = data({"type": "message", "usage": {"input_tokens": 7, "output_tokens": 3}})
    assert answer_usage(answer) == Usage(7, 3)
    assert answer_usage(b"not json") is None


def test_stream_errors_have_the_status_of_their_type() -> None:
    assert error_status(OVERFLOW) == 400
    overloaded = data({"type": "error", "error": {"type": "overloaded_error", "message": "x"}})
    assert error_status(overloaded) == 529
    assert error_status(DELTA) is None
    overflow = classify_overflow(400, OVERFLOW)
    assert overflow is not None and overflow.window == 16384 and overflow.prompt_tokens == 20512


@pytest.mark.parametrize(
    ("status", "message", "kind", "window"),
    [
        (400, "prompt is too long: 213462 tokens > 200000 maximum", "prompt", 200000),
        (
            400,
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again",
            "prompt_plus_output",
            200000,
        ),
    ],
)
def test_overflow_forms(status: int, message: str, kind: str, window: int) -> None:
    body = orjson.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )
    overflow = classify_overflow(status, body)
    assert overflow is not None and (overflow.kind, overflow.window) == (kind, window)


def test_byte_limit_is_not_a_token_window() -> None:
    body = orjson.dumps(
        {"type": "error", "error": {"type": "request_too_large", "message": "Request too large"}}
    )
    overflow = classify_overflow(413, body)
    assert overflow is not None and overflow.kind == "bytes"


def test_error_envelope_and_event() -> None:
    assert orjson.loads(error_body(401, "bad key")) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "bad key"},
    }
    assert orjson.loads(error_body(502, "down"))["error"]["type"] == "api_error"
    event = error_event("broke")
    assert event.startswith(b"event: error\ndata: {") and event.endswith(b"\n\n")


def test_summary_call_over_messages() -> None:
    call = SummaryCall(
        messages=[
            {"role": "system", "content": "You summarise."},
            {"role": "user", "content": "the turns"},
        ],
        max_tokens=500,
        model=None,
    )
    body = orjson.loads(summary_body(call, "claude-small"))
    assert body["model"] == "claude-small" and body["max_tokens"] == 500
    assert body["system"] == "You summarise."
    assert body["messages"] == [{"role": "user", "content": "the turns"}]
    answer = data(
        {
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "## Goal\n"},
                {"type": "text", "text": "done"},
            ],
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": 100, "output_tokens": 500},
        }
    )
    reply = summary_reply(answer)
    assert reply.text == "## Goal\ndone" and reply.finish_reason == "length"
    assert (reply.prompt_tokens, reply.completion_tokens) == (100, 500)
    with pytest.raises(SummaryCallError):
        summary_reply(b"{}")
