"""A body that grew out of one parsed before is parsed only as far as it is new, and the result
is always what a full parse gives; anything else is parsed whole."""

from __future__ import annotations

import json
from typing import Any

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.doors.chat.request import parse_chat_request
from proxy.doors.grown_bodies import FOREIGN_SKIPS, GrownBodies
from proxy.doors.messages.request import read_body
from proxy.doors.responses.wire import parse_request
from session.errors import BadRequest
from session.ports.frontdoor import IMAGE_MARK
from tests.proxy.doors.responses.test_items import history as responses_history
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

text = st.text(st.characters(codec="utf-8"), max_size=40)  # escapes, controls, non-ASCII
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3)
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": text},
    optional={"name": st.text(max_size=5), "extra": values},
)
fields = st.dictionaries(
    st.sampled_from(["temperature", "tools", "metadata", "vendor_x", "stream", "user"]),
    values,
    max_size=4,
).map(lambda d: {k: v for k, v in d.items() if k not in ("tools", "stream")})


# Conversations are told apart by their first 512 bytes: every one here opens with this.
SYSTEM = {"role": "system", "content": "You are a careful agent. " * 30}


def body(before: dict[str, Any], history: list[Any], after: dict[str, Any]) -> bytes:
    return orjson.dumps({**before, "model": "gpt-4o", "messages": [SYSTEM, *history], **after})


def earlier() -> GrownBodies:
    return GrownBodies("messages", smallest_bytes=0)


@settings(max_examples=150, deadline=None)
@given(
    before=fields,
    after=fields,
    history=st.lists(messages, min_size=1, max_size=6),
    turns=st.lists(st.lists(messages, max_size=3), min_size=1, max_size=4),
)
def test_a_growing_conversation_parses_as_a_full_parse_would(
    before: dict[str, Any],
    after: dict[str, Any],
    history: list[Any],
    turns: list[list[Any]],
) -> None:
    cache = earlier()
    parse_chat_request(body(before, history, after), cache)
    for added in turns:
        history = history + added
        raw = body(before, history, after)
        found = cache.find(raw)
        assert found is not None  # every body here grew out of the one before it
        request = parse_chat_request(raw, cache)
        assert request.body == orjson.loads(raw)
        assert list(request.body) == list(orjson.loads(raw))  # key order too
        assert request.messages == [SYSTEM, *history] and request.raw is raw


image_part = st.builds(
    lambda url: {"type": "image_url", "image_url": {"url": url}},
    st.sampled_from(["https://x/a.png", "data:image/png;base64,AAAA", '"image_url"']),
)
pictured = st.builds(
    lambda parts, said: {"role": "user", "content": [*parts, {"type": "text", "text": said}]},
    st.lists(image_part, max_size=3),
    st.sampled_from(["look", 'a "image_url" key', "image_url"]),
)


def image_parts(history: list[Any]) -> int:
    return sum(
        p["type"] == "image_url"
        for m in history
        if isinstance(m["content"], list)
        for p in m["content"]
    )


@settings(max_examples=100, deadline=None)
@given(
    history=st.lists(messages | pictured, min_size=1, max_size=4),
    turns=st.lists(st.lists(messages | pictured, max_size=3), min_size=1, max_size=4),
)
def test_a_grown_body_knows_its_image_marks_without_a_scan(
    history: list[Any], turns: list[list[Any]]
) -> None:
    # The bound on a request's tokens adds a flat cost per image mark; a body parsed whole
    # counts its image parts as its messages are checked, and a grown body's count comes
    # from the body it grew out of plus the marks in what was added: never fewer than its
    # image parts, never more than a full scan finds.
    cache = GrownBodies("messages", smallest_bytes=0, mark=IMAGE_MARK)
    first = body({}, history, {})
    assert parse_chat_request(first, cache).image_marks == image_parts(history)
    for added in [*turns, []]:  # the last body comes again unchanged, as a retry does
        history = history + added
        raw = body({}, history, {})
        marks = parse_chat_request(raw, cache).image_marks
        assert marks is not None and image_parts(history) <= marks <= raw.count(IMAGE_MARK)
    pictures = [{"type": "input_image", "image_url": "https://x/a.png"}]
    items = [RULES, {"type": "message", "role": "user", "content": pictures}]
    responses = GrownBodies("input", smallest_bytes=0, mark=IMAGE_MARK)
    parse_request(orjson.dumps({"model": "m", "input": items[:1]}), responses)
    raw = orjson.dumps({"model": "m", "input": items})
    assert parse_request(raw, responses).image_marks == 1 == raw.count(IMAGE_MARK)


def test_what_did_not_grow_is_parsed_whole() -> None:
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "a" * 50}]
    cache = earlier()
    parse_chat_request(body({}, history, {"tools": []}), cache)
    edited = [history[0], {"role": "user", "content": "b" * 50}, {"role": "user", "content": "c"}]
    shrunk = history[:1]
    other_key_changed = body({}, history, {"tools": [{"type": "function"}]})
    for raw in (
        body({}, edited, {"tools": []}),
        body({}, shrunk, {"tools": []}),
        other_key_changed,
    ):
        assert cache.find(raw) is None
        assert parse_chat_request(raw, cache).body == orjson.loads(raw)


def test_another_writers_bytes_are_parsed_whole_every_time() -> None:
    history = [{"role": "user", "content": "caf\u00e9 " * 20}]
    cache = earlier()
    spaced = json.dumps({"model": "m", "messages": [SYSTEM, *history]})  # ", ", ": ", \\u00e9
    parse_chat_request(spaced.encode(), cache)
    grown = json.dumps(
        {"model": "m", "messages": [SYSTEM, *history, {"role": "user", "content": "x"}]}
    )
    assert cache.find(grown.encode()) is None
    assert parse_chat_request(grown.encode(), cache).messages[-1]["content"] == "x"


def test_one_odd_body_does_not_bar_its_opening_for_good() -> None:
    history = [{"role": "user", "content": "a" * 40}]
    cache = earlier()
    odd = body({}, history, {"temperature": 1}).replace(b'"temperature":1', b'"temperature":1e0')
    parse_chat_request(odd, cache)  # orjson writes 1e0 back as 1.0: another writer's bytes
    bodies = [body({}, [*history, {"role": "user", "content": str(i)}], {}) for i in range(20)]
    for raw in bodies[:FOREIGN_SKIPS]:
        parse_chat_request(raw, cache)
        assert cache.find(raw) is None  # left alone for a while
    parse_chat_request(bodies[FOREIGN_SKIPS], cache)
    assert cache.find(bodies[FOREIGN_SKIPS]) is not None  # then tried, and kept, again


def test_a_bad_message_added_is_refused_and_never_counted_as_checked() -> None:
    history: list[Any] = [{"role": "user", "content": "a" * 40}]
    cache = earlier()
    parse_chat_request(body({}, history, {}), cache)
    broken = [*history, {"role": "user", "content": 7}]
    with pytest.raises(BadRequest, match=r"messages\[2\]"):
        parse_chat_request(body({}, broken, {}), cache)
    # Grown out of the refused body, the bad message is still checked (and refused).
    with pytest.raises(BadRequest, match=r"messages\[2\]"):
        parse_chat_request(body({}, [*broken, {"role": "user", "content": "ok"}], {}), cache)
    fine = [*history, {"role": "user", "content": "ok"}]
    assert parse_chat_request(body({}, fine, {}), cache).messages == [SYSTEM, *fine]


def test_added_bytes_that_are_not_messages_of_the_array_are_parsed_whole() -> None:
    history = [{"role": "user", "content": "a" * 40}]
    cache = earlier()
    raw = body({}, history, {"temperature": 0.5})
    parse_chat_request(raw, cache)
    end = raw.index(b"}]") + 1  # where the messages array closes
    injected = raw[:end] + b', {"role": "user", "content": "spaced"}' + raw[end:]
    assert cache.find(injected) is None  # written back differently: not taken as grown
    assert parse_chat_request(injected, cache).messages[-1]["content"] == "spaced"


def test_kept_bodies_stay_within_the_budget() -> None:
    cache = GrownBodies("messages", budget_bytes=4_000, smallest_bytes=0)
    bodies = [body({}, [{"role": "user", "content": f"{i} " + "x" * 900}], {}) for i in range(10)]
    for raw in bodies:
        parse_chat_request(raw, cache)
    assert cache.find(bodies[-1]) is not None  # the newest are kept
    assert cache.find(bodies[0]) is None  # the oldest were let go


def test_through_ctxgate_grown_edited_and_broken_bodies(sim: Simulator, db_path: str) -> None:
    """The OpenAI SDK writes compact JSON, so a growing session of 40 KB bodies takes the grown
    path: the upstream still receives exactly the conversation sent, an edit of an earlier
    message reaches it, and a bad message added to a kept body is refused before any call."""
    with ProxyServer(settings_for(sim.base_url, db_path)) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
        history: list[Any] = [{"role": "system", "content": "Follow the rules. " * 2400}]

        def send(messages: list[Any]) -> str:
            answer = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, extra_headers={"x-session-id": "grow"}
            )
            assert orjson.loads(sim.chat_requests[-1].raw)["messages"] == messages
            return answer.choices[0].message.content or ""

        for step in range(4):
            history.append({"role": "user", "content": f'step {step}: \u00e9\n"quoted"'})
            history.append({"role": "assistant", "content": send(history)})
        history[1] = {"role": "user", "content": "step 0, edited"}
        send([*history, {"role": "user", "content": "after the edit"}])
        calls = len(sim.chat_requests)
        with pytest.raises(openai.BadRequestError, match=r"messages\[10\]"):
            send([*history, {"role": "user", "content": "fine"}, {"role": "user", "content": 7}])
        assert len(sim.chat_requests) == calls


# -- Messages: the conversion to chat-shaped messages is extended, not redone ------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
BLOCKS = {
    "user": st.one_of(
        TEXT,
        st.lists(
            st.one_of(
                st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
                st.fixed_dictionaries(
                    {"type": st.just("tool_result"), "tool_use_id": TEXT, "content": TEXT}
                ),
            ),
            min_size=1,
            max_size=3,
        ),
    ),
    "assistant": st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
            st.fixed_dictionaries(
                {"type": st.just("thinking"), "thinking": TEXT, "signature": TEXT}
            ),
            st.fixed_dictionaries(
                {
                    "type": st.just("tool_use"),
                    "id": TEXT,
                    "name": st.just("Bash"),
                    "input": st.dictionaries(TEXT, TEXT, max_size=2),
                }
            ),
        ),
        min_size=1,
        max_size=3,
    ),
    "system": TEXT,  # Claude Code's reminders among the turns
}
wire_messages = st.sampled_from(["user", "assistant", "system"]).flatmap(
    lambda role: st.fixed_dictionaries({"role": st.just(role), "content": BLOCKS[role]})
)


def messages_body(history: list[Any]) -> bytes:
    system = [{"type": "text", "text": "You are Claude Code. " * 40}]
    return orjson.dumps(
        {"model": "claude-x", "max_tokens": 64, "system": system, "messages": history}
    )


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(wire_messages, min_size=1, max_size=5),
    turns=st.lists(st.lists(wire_messages, max_size=3), min_size=1, max_size=4),
)
def test_a_growing_messages_conversation_converts_as_a_full_read_would(
    history: list[Any], turns: list[list[Any]]
) -> None:
    cache = GrownBodies("messages", smallest_bytes=0, mark=IMAGE_MARK)
    read_body(messages_body(history), cache)
    for added in turns:
        history = history + added
        raw = messages_body(history)
        assert cache.find(raw) is not None
        grown, whole = read_body(raw, cache), read_body(raw)
        assert grown.image_marks == raw.count(IMAGE_MARK) and whole.image_marks is None
        assert grown.body == whole.body
        assert grown.messages == whole.messages  # the ORIGINAL each carries included


# -- Responses: the grouping goes on from where it stood, the groups it extends convert anew ---

RULES = {
    "type": "message",
    "role": "developer",
    "content": [{"type": "input_text", "text": "x" * 600}],
}


@settings(max_examples=150, deadline=None)
@given(case=responses_history(), cuts=st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_a_growing_responses_conversation_converts_as_a_full_parse_would(
    case: tuple[list[Any], str | None], cuts: list[float]
) -> None:
    items, instructions = case
    items = [RULES, *items]
    ends = sorted({max(1, round(c * len(items))) for c in cuts} | {len(items)})
    cache = GrownBodies("input", smallest_bytes=0)
    for number, end in enumerate(ends):
        raw = orjson.dumps(
            {"model": "gpt-5-codex", "instructions": instructions, "input": items[:end]}
        )
        if number:  # any cut: between a call and its output, inside a turn, after an output
            assert cache.find(raw) is not None
        grown, whole = parse_request(raw, cache), parse_request(raw)
        assert grown.body == whole.body
        assert grown.messages == whole.messages  # the items each carries included
        assert grown.passthrough == whole.passthrough


def test_a_repeated_key_after_the_array_is_never_taken_for_its_end() -> None:
    """A `]` of a repeated key's value looks like the array's end from the bytes around it; a
    body that grew there is parsed whole, as the upstream reads it."""
    last = orjson.dumps({"role": "user", "content": "hello"})
    added = orjson.dumps({"role": "user", "content": "INJECTED"})
    opening = b'{"model":"gpt-4o","messages":[' + orjson.dumps(SYSTEM) + b"," + last
    raw = opening + b'],"x":[' + last + b'],"x":1}'
    cache = earlier()
    parse_chat_request(raw, cache)
    grown = opening + b'],"x":[' + last + b"," + added + b'],"x":1}'
    assert cache.find(grown) is None
    assert parse_chat_request(grown, cache).messages == orjson.loads(grown)["messages"]


@settings(max_examples=150, deadline=None)
@given(
    before=fields,
    after=fields,
    history=st.lists(messages | pictured, min_size=1, max_size=8),
    steps=st.lists(
        st.tuples(
            st.integers(0, 8),
            st.integers(0, 3),
            st.lists(messages | pictured, min_size=0, max_size=3),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_an_edited_conversation_parses_as_a_full_parse_would(
    before: dict[str, Any],
    after: dict[str, Any],
    history: list[Any],
    steps: list[tuple[int, int, list[Any]]],
) -> None:
    """A run of messages replaced in place, or taken out (with nothing put in and nothing
    taken out, one is added), again and again: each body is found from the one before and
    parses as a full parse."""
    cache = GrownBodies("messages", smallest_bytes=0, mark=IMAGE_MARK)
    parse_chat_request(body(before, history, after), cache)
    for at, removed, put in steps:
        at = min(at, len(history))
        edited = history[:at] + put + history[at + removed :]
        if edited == history:  # nothing put in or taken out: the conversation grows
            edited = history + [{"role": "user", "content": f"next {at}"}]
        raw = body(before, edited, after)
        if len(edited) > 1:  # not down to SYSTEM alone (its array's comma goes too)
            assert cache.find(raw, edits=True) is not None
        request = parse_chat_request(raw, cache)
        assert request.body == orjson.loads(raw)
        assert list(request.body) == list(orjson.loads(raw))
        marks = request.image_marks
        assert marks is not None and image_parts(edited) <= marks <= raw.count(IMAGE_MARK)
        history = edited


def test_a_bad_message_put_in_by_an_edit_is_refused() -> None:
    history: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    cache = earlier()
    parse_chat_request(body({}, history, {}), cache)
    edited = [*history[:2], {"role": "user", "content": 7}, *history[3:]]
    raw = body({}, edited, {})
    assert cache.find(raw, edits=True) is not None
    with pytest.raises(BadRequest, match=r"messages\[3\]\.content"):
        parse_chat_request(raw, cache)
    # The refused body was not kept: its bad message is found again, edited or not.
    again = body({}, [*edited, {"role": "user", "content": "ok"}], {})
    with pytest.raises(BadRequest, match=r"messages\[3\]\.content"):
        parse_chat_request(again, cache)


def test_what_an_edit_cannot_explain_is_parsed_whole() -> None:
    history: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    cache = earlier()
    parse_chat_request(body({}, history, {"temperature": 1}), cache)
    changed_after = body({}, [*history[:2], {"role": "user", "content": "x"}], {"temperature": 2})
    spaced = body({}, history, {"temperature": 1}).replace(b'"turn 2"}', b'"turn 2" }')
    for raw in (changed_after, spaced):
        assert cache.find(raw, edits=True) is None
        assert parse_chat_request(raw, cache).body == orjson.loads(raw)
    # Doors that extend a conversion of the kept messages ask for grown bodies only.
    cache = earlier()
    parse_chat_request(body({}, history, {"temperature": 1}), cache)
    edited = body(
        {}, [*history[:2], {"role": "user", "content": "y"}, *history[3:]], {"temperature": 1}
    )
    assert cache.find(edited) is None and cache.find(edited, edits=True) is not None


def test_a_comma_where_a_message_was_is_no_edit() -> None:
    """Bytes a kept body's boundaries explain but orjson would refuse: parsed whole, refused."""
    history: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(4)]
    cache = earlier()
    base = body({}, history, {})
    parse_chat_request(base, cache)
    second, third = orjson.dumps(history[1]), orjson.dumps(history[2])
    doubled = base.replace(b"," + third, b",," + third)  # a comma put in
    left = base.replace(third + b",", b",")  # a message taken out, its comma left
    opened = base.replace(b'"messages":[', b'"messages":[,')  # a comma before the first
    for raw in (doubled, left, opened):
        assert second in raw and cache.find(raw, edits=True) is None
        with pytest.raises(BadRequest):
            parse_chat_request(raw, cache)


def test_an_edited_body_counts_its_image_parts_exactly() -> None:
    """Every image part type the checks count, an edit taking some out and putting others in."""
    anthropic_like = {"role": "user", "content": [{"type": "image", "source": {}}]}
    url = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    history: list[Any] = [url, anthropic_like, {"role": "user", "content": "look"}, url]
    cache = GrownBodies("messages", smallest_bytes=0, mark=IMAGE_MARK)
    assert parse_chat_request(body({}, history, {}), cache).image_marks == 3
    edited = [history[0], {"role": "user", "content": "no picture"}, *history[2:]]
    assert cache.find(body({}, edited, {}), edits=True) is not None
    assert parse_chat_request(body({}, edited, {}), cache).image_marks == 2
    grown = [*edited, anthropic_like]
    assert parse_chat_request(body({}, grown, {}), cache).image_marks == 3


def test_an_agents_small_history_that_grew_keeps_its_parsed_messages() -> None:
    """An 8K-token agent history is 20-35 KB of JSON: a turn added to it is parsed alone,
    and the earlier messages are the very objects parsed before (their digests are kept by
    identity: see session.compaction.DigestMemo)."""
    cache = GrownBodies("messages")  # the server's own threshold
    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"Step {i}: " + "word " * 200}
        for i in range(1, 13)
    ]
    first = body({}, turns, {})
    assert 9 * 1024 < len(first) < 32 * 1024
    before = parse_chat_request(first, cache).messages
    cache.settle()
    grown = body({}, [*turns, {"role": "assistant", "content": "Done."}], {})
    assert cache.find(grown) is not None
    after = parse_chat_request(grown, cache).messages
    assert after == orjson.loads(grown)["messages"]
    assert all(a is b for a, b in zip(after, before, strict=False))
