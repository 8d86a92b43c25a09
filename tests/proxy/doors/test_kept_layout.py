"""Where a kept body's messages array ends and each message starts: found by writing each
message once, and only for bytes orjson writes back exactly (else the body is another
writer's, and no offset is trusted)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.doors.grown_bodies import _layout
from tests.proxy.doors.test_grown_bodies import fields, messages


@settings(max_examples=200, deadline=None)
@given(before=fields, after=fields, history=st.lists(messages, min_size=1, max_size=6))
def test_the_offsets_are_those_of_the_bytes(
    before: dict[str, Any], after: dict[str, Any], history: list[Any]
) -> None:
    body = {**before, "model": "gpt-4o", "messages": history, **after}
    raw = orjson.dumps(body)
    layout = _layout(raw, body, "messages")
    assert layout is not None
    end, starts = layout
    bounds = [*starts, end + 1]  # each entry runs up to the comma (or `]`) before the next
    pairs = zip(bounds, bounds[1:], strict=False)
    assert [orjson.loads(raw[a : b - 1]) for a, b in pairs] == history
    assert raw[end : end + 1] == b"]"
    assert orjson.loads(raw[: starts[0]] + b"]" + raw[end + 1 :]) == {**body, "messages": []}


@settings(max_examples=100, deadline=None)
@given(before=fields, after=fields, history=st.lists(messages, min_size=1, max_size=4))
def test_bytes_another_writer_wrote_have_no_layout(
    before: dict[str, Any], after: dict[str, Any], history: list[Any]
) -> None:
    body = {**before, "model": "gpt-4o", "messages": history, **after}
    spaced = json.dumps(body).encode()  # ", " and ": " between items
    assert _layout(spaced, body, "messages") is None
    escaped = orjson.dumps(body).replace(b'"gpt-4o"', b'"gpt\\u002d4o"')
    assert _layout(escaped, body, "messages") is None


def test_a_message_written_otherwise_has_no_layout() -> None:
    history = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    body = {"model": "gpt-4o", "messages": history}
    raw = orjson.dumps(body)
    assert _layout(raw, body, "messages") is not None
    assert _layout(raw.replace(b'"b"', b'"\\u0062"'), body, "messages") is None
    assert _layout(raw.replace(b'"a"},{', b'"a"} ,{'), body, "messages") is None
    assert _layout(raw + b" ", body, "messages") is None
