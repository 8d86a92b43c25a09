"""The Responses door's pure parts: request parsing, the stream watch, usage, overflow in either
shape, the summary call over Responses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compression.engine import SummaryCall, SummaryCallError
from proxy.doors.responses.responses_door import ResponsesDoor
from proxy.doors.responses.stream import ResponsesWatch
from session.errors import BadRequest
from session.ports.frontdoor import ORIGINAL, Usage

DOOR = ResponsesDoor()
OVERFLOW_MESSAGE = "Your input exceeds the context window of this model. Please adjust your input."


def raw(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def event(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields, "sequence_number": 3}).encode()


def test_parse_keeps_the_body_and_counts_what_the_provider_counts() -> None:
    tool = {"type": "function", "name": "shell", "parameters": {"type": "object"}}
    body = {
        "model": "gpt-5",
        "instructions": "Be brief.",
        "input": "hello",
        "tools": [tool, {"type": "web_search"}],
        "max_output_tokens": 300,
        "stream": True,
        "prompt_cache_key": "pck-1",
        "reasoning": {"summary": "auto"},
    }
    request = DOOR.parse(raw(body))
    assert request.body == body and request.model == "gpt-5" and request.stream
    assert request.max_tokens == 300 and request.session_hint == "pck-1"
    assert request.passthrough is None
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert request.messages[1]["content"] == "hello"
    assert request.tools == [
        {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}},
        {"type": "web_search"},
    ]
    assert DOOR.render(request, request.messages, None) == request.raw
    rendered = json.loads(DOOR.render(request, request.messages[1:], 100))
    assert rendered == {
        **body,
        "input": [{"role": "user", "content": "hello"}],
        "max_output_tokens": 100,
    }
    assert ORIGINAL not in json.dumps(rendered)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"previous_response_id": "resp_1", "input": "more"}, "previous_response_id"),
        ({"conversation": "conv_1", "input": "more"}, "conversation"),
        (
            {"input": [{"role": "user", "content": "x"}, {"type": "compaction_trigger"}]},
            "compaction_trigger",
        ),
    ],
)
def test_history_on_the_provider_is_passed_through(body: dict[str, Any], reason: str) -> None:
    request = DOOR.parse(raw({"model": "m", **body}))
    assert request.passthrough is not None and request.passthrough.startswith(reason)
    assert DOOR.render(request, [], 5) == request.raw  # whatever the core asks


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": ["x"]}, "input[0]"),
        ({"model": "m", "input": "x", "instructions": ["x"]}, "instructions"),
        ({"model": "m", "input": "x", "stream": "yes"}, "stream"),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "m", "input": "x", "tools": {}}, "tools"),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as bad:
        DOOR.parse(raw(body))
    assert bad.value.param == param
    with pytest.raises(BadRequest):
        DOOR.parse(b"{not json")


def test_the_watch_reads_usage_finish_and_failures() -> None:
    watch = DOOR.watch(DOOR.parse(raw({"model": "m", "input": "x"})))
    assert isinstance(watch, ResponsesWatch)
    marked = [event(kind) for kind in ("response.completed", "response.failed", "error")]
    assert all(any(m in data for m in watch.markers) for data in marked)
    assert not any(m in event("response.output_text.delta", delta="x") for m in watch.markers)
    assert watch.preamble(event("response.created", response={"error": None}))
    assert watch.preamble(b'{"sequence_number":1,"type":"response.in_progress"}')
    assert not watch.preamble(event("response.output_text.delta", delta="hi"))
    assert not watch.preamble(b"")
    assert watch.inspect(event("response.output_text.delta", delta="hi"))
    assert not watch.finished and watch.usage is None
    usage = {
        "input_tokens": 1200,
        "input_tokens_details": {"cached_tokens": 1024},
        "output_tokens": 7,
    }
    assert watch.inspect(
        event("response.completed", response={"status": "completed", "usage": usage})
    )
    assert watch.finished and watch.failed is None
    assert watch.usage == Usage(1200, 7, cache_read=1024)
    failing = ResponsesWatch()
    error = {"code": "server_error", "message": "boom"}
    assert failing.inspect(event("response.failed", response={"status": "failed", "error": error}))
    assert failing.finished and failing.failed == "upstream response.failed: server_error"
    assert "boom" not in failing.failed  # the provider's message may quote the request
    errored = ResponsesWatch()
    errored.inspect(event("error", code="rate_limit_exceeded", message="slow down"))
    assert errored.failed == "upstream error: rate_limit_exceeded"


def test_the_watch_reports_ctxgate_failures_as_an_error_event() -> None:
    watch = ResponsesWatch()
    watch.inspect(event("response.output_text.delta", delta="hi"))
    sent = watch.error_event("The upstream stream was interrupted.")
    assert sent.startswith(b"event: error\ndata: ") and sent.endswith(b"\n\n")
    data = json.loads(sent.split(b"data: ", 1)[1])
    assert data == {
        "type": "error",
        "code": "upstream_error",
        "message": "The upstream stream was interrupted.",
        "param": None,
        "sequence_number": 4,
    }


def test_overflow_as_status_and_inside_the_stream() -> None:
    envelope = {
        "message": OVERFLOW_MESSAGE,
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
    as_status = DOOR.overflow(400, raw({"error": envelope}))
    assert as_status is not None and as_status.kind == "prompt" and as_status.window is None
    failed = event(
        "response.failed",
        response={
            "status": "failed",
            "error": {"code": "context_length_exceeded", "message": OVERFLOW_MESSAGE},
        },
    )
    assert DOOR.stream_error(failed) == 400
    in_stream = DOOR.overflow(400, failed)
    assert in_stream is not None and in_stream.kind == "prompt"
    error_event = event(
        "error", code="context_length_exceeded", message=OVERFLOW_MESSAGE, param=None
    )
    assert DOOR.stream_error(error_event) == 400 and DOOR.overflow(400, error_event) is not None
    other = event("response.failed", response={"error": {"code": "server_error", "message": "x"}})
    assert DOOR.stream_error(other) == 500 and DOOR.overflow(500, other) is None
    rate = event("error", code="rate_limit_exceeded", message="Rate limit reached: tokens per min")
    assert DOOR.stream_error(rate) == 429 and DOOR.overflow(429, rate) is None
    assert DOOR.stream_error(event("response.created", response={"error": None})) is None
    assert DOOR.stream_error(event("response.output_text.delta", delta="error")) is None


def test_usage_of_an_answer() -> None:
    answer = {"object": "response", "usage": {"input_tokens": 50, "output_tokens": 5}}
    assert DOOR.usage(raw(answer)) == Usage(50, 5)
    assert DOOR.usage(raw({"object": "response"})) is None
    assert DOOR.usage(b"not json") is None


def test_the_summary_call_over_responses() -> None:
    call = SummaryCall(
        messages=[
            {"role": "system", "content": "Summarise."},
            {"role": "user", "content": "turns"},
        ],
        max_tokens=800,
        model=None,
    )
    body = json.loads(DOOR.summary_body(call, "gpt-5-mini"))
    assert body == {
        "model": "gpt-5-mini",
        "instructions": "Summarise.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "turns"}],
            }
        ],
        "max_output_tokens": 800,
        "stream": False,
        "store": False,
    }
    answer = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "## Goal\n"},
                    {"type": "output_text", "text": "fix it"},
                ],
            },
        ],
        "usage": {"input_tokens": 900, "output_tokens": 800},
    }
    reply = DOOR.summary_reply(raw(answer))
    assert reply.text == "## Goal\nfix it" and reply.finish_reason == "length"
    assert (reply.prompt_tokens, reply.completion_tokens) == (900, 800)
    with pytest.raises(SummaryCallError):
        DOOR.summary_reply(raw({"error": {"message": "no"}}))
