"""Where a kept body's messages array ends and each message starts: found by writing each
message once, and only for bytes orjson writes back exactly (else the body is another
writer's, and no offset is trusted)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.doors.grown_bodies import LAID_LATER_BYTES, GrownBodies
from proxy.doors.layout import layout_of
from tests.proxy.doors.test_grown_bodies import fields, messages


@settings(max_examples=200, deadline=None)
@given(before=fields, after=fields, history=st.lists(messages, min_size=1, max_size=6))
def test_the_offsets_are_those_of_the_bytes(
    before: dict[str, Any], after: dict[str, Any], history: list[Any]
) -> None:
    body = {**before, "model": "gpt-4o", "messages": history, **after}
    raw = orjson.dumps(body)
    layout = layout_of(raw, body, "messages")
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
    assert layout_of(spaced, body, "messages") is None
    escaped = orjson.dumps(body).replace(b'"gpt-4o"', b'"gpt\\u002d4o"')
    assert layout_of(escaped, body, "messages") is None


def test_a_message_written_otherwise_has_no_layout() -> None:
    history = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    body = {"model": "gpt-4o", "messages": history}
    raw = orjson.dumps(body)
    assert layout_of(raw, body, "messages") is not None
    assert layout_of(raw.replace(b'"b"', b'"\\u0062"'), body, "messages") is None
    assert layout_of(raw.replace(b'"a"},{', b'"a"} ,{'), body, "messages") is None
    assert layout_of(raw + b" ", body, "messages") is None


def body_of(texts: list[str], system: str = "s" * 600) -> dict[str, Any]:
    history = [{"role": "system", "content": system}]
    history += [{"role": "user", "content": t} for t in texts]
    return {"model": "gpt-4o", "messages": history}


def test_a_body_whose_messages_another_writer_wrote_is_found_by_no_later_body() -> None:
    """Its messages are checked when a later body of its opening is looked for, not as it is
    kept: it is then let go, and its opening left alone a while, as if checked at once."""
    kept = GrownBodies("messages", smallest_bytes=0)
    texts = ["a" * 40, "b" * 40]
    first = body_of(texts)
    escaped = orjson.dumps(first).replace(b'"' + b"b" * 40, b'"\\u0062' + b"b" * 39)
    kept.keep(escaped, orjson.loads(escaped))
    grown = orjson.dumps(body_of([*texts, "c" * 40]))
    assert kept.find(grown) is None
    kept.keep(grown, orjson.loads(grown))  # left alone: the opening is another writer's
    assert kept.find(orjson.dumps(body_of([*texts, "c" * 40, "d" * 40]))) is None
    # A compact writer's body of another opening is kept and found grown.
    other = body_of(texts, system="t" * 600)
    kept.keep(orjson.dumps(other), other)
    found = kept.find(orjson.dumps(body_of([*texts, "e" * 40], system="t" * 600)))
    assert found is not None and found.known == 3


def test_a_large_body_whose_messages_another_writer_wrote_is_let_go_as_it_is_kept() -> None:
    kept = GrownBodies("messages", smallest_bytes=0)
    texts = ["a" * 40, "b" * (LAID_LATER_BYTES + 10)]
    escaped = orjson.dumps(body_of(texts)).replace(b'"' + b"a" * 40, b'"\\u0061' + b"a" * 39)
    kept.keep(escaped, orjson.loads(escaped))
    assert kept._bytes == 0  # not held until a later body of its opening is looked for
    compact = body_of(["x" * 40, "b" * (LAID_LATER_BYTES + 10)], system="t" * 600)
    kept.keep(orjson.dumps(compact), compact)
    assert kept._bytes == len(orjson.dumps(compact))
