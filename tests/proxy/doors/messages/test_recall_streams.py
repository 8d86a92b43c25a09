"""ctxgate's recall tool in Messages streams: a stream added up into its Message (built from
the simulator's own answer and event writers), and the tool's calls hidden from a relayed
stream, read back with the `anthropic` SDK's accumulator; any interleaving (property)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.summary.handles import RECALL_TOOL
from proxy.doors.messages.messages_door import MessagesDoor
from tests.proxy.doors.recall_fixtures import RECALL_CALL, event_data, serve_events
from tests.simulator import ModelSpec, Reply, Simulator
from tests.simulator.anthropic_cache import CacheUsage
from tests.simulator.anthropic_rules import ThinkingSigner
from tests.simulator.anthropic_sse import (
    Answer,
    content_blocks,
    encode,
    message_object,
    output_tokens_of,
    stop_reason_of,
    stream_events,
)

MODEL = "claude-sim"
DOOR = MessagesDoor()
BASH_CALL = {"name": "Bash", "arguments": {"command": "ls"}}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(default=ModelSpec(window=128_000)) as simulator:
        yield simulator


SIGNER = ThinkingSigner()


def answer_of(reply: Reply, thinking: str | None = "shown", content: Any = None) -> Answer:
    ids = itertools.count(1)
    blocks = content or content_blocks(
        reply, thinking=thinking, signer=SIGNER, next_id=lambda: f"toolu_01Sim{next(ids):013d}"
    )
    return Answer(
        message_id="msg_01Sim0000000000001",
        model=MODEL,
        content=blocks,
        stop_reason=stop_reason_of(reply),
        usage=CacheUsage(120, 30, 4000),
        output_tokens=output_tokens_of(reply, blocks),
    )


def events_of(answer: Answer) -> list[bytes]:
    return [encode(event) for event in stream_events(answer)]


@pytest.mark.parametrize(
    ("reply", "decided"),
    [
        (Reply(tool_calls=[RECALL_CALL, BASH_CALL]), "recall"),
        (Reply(content="From memory.", tool_calls=[RECALL_CALL]), "answer"),
        (Reply(tool_calls=[BASH_CALL, RECALL_CALL]), "answer"),
        (Reply(content="Hello."), "answer"),
    ],
)
def test_a_stream_adds_up_to_the_non_streamed_message(reply: Reply, decided: str) -> None:
    answer = answer_of(reply)
    stream = DOOR.answer_stream(RECALL_TOOL)
    decisions = []
    events = events_of(answer)
    for event in events:
        stream.feed(event_data(event))
        decisions.append(stream.decided)
    assert orjson.loads(stream.answer()) == message_object(answer)
    # message_start, ping and the thinking block decide nothing; the next block does
    second = [n for n, e in enumerate(events) if e.startswith(b"event: content_block_start")][1]
    assert set(decisions[:second]) == {None} and set(decisions[second:]) == {decided}
    found = DOOR.tool_calls(stream.answer(), RECALL_TOOL)
    assert (found is not None) == any(c["name"] == RECALL_TOOL for c in reply.tool_calls or [])


def filtered(events: list[bytes]) -> list[bytes]:
    hider = DOOR.call_filter(RECALL_TOOL)
    return [out for event in events if (out := hider.event(event)) is not None]


def sdk_final(sim: Simulator, events: list[bytes]) -> Any:
    serve_events(sim, events)
    with anthropic.Anthropic(base_url=sim.base_url.removesuffix("/v1"), api_key="k") as client:
        with client.messages.stream(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            return stream.get_final_message()


@pytest.mark.parametrize(
    ("reply", "kinds", "stop"),
    [
        (Reply(content="Let me look.", tool_calls=[RECALL_CALL]), ["thinking", "text"], "end_turn"),
        (
            Reply(content="Two.", tool_calls=[RECALL_CALL, BASH_CALL]),
            ["thinking", "text", "tool_use"],
            "tool_use",
        ),
        (
            Reply(tool_calls=[BASH_CALL, RECALL_CALL]),
            ["thinking", "tool_use"],
            "tool_use",
        ),
    ],
)
def test_the_client_never_sees_the_tool_in_a_relayed_stream(
    sim: Simulator, reply: Reply, kinds: list[str], stop: str
) -> None:
    answer = answer_of(reply)
    events = events_of(answer)
    shown = filtered(events)
    assert RECALL_TOOL.encode() not in b"".join(shown)
    final = sdk_final(sim, shown)
    assert [block.type for block in final.content] == kinds
    assert final.stop_reason == stop
    expected = [b for b in answer.content if b.get("name") != RECALL_TOOL]
    assert [block.model_dump(exclude_none=True) for block in final.content] == expected
    untouched = [e for e in events if b'"index":0' in e or b"ping" in e]
    assert all(any(out is e for out in shown) for e in untouched)  # the same bytes


def test_blocks_after_a_hidden_call_are_renumbered(sim: Simulator) -> None:
    reply = Reply(content="Done.", tool_calls=[RECALL_CALL, BASH_CALL])
    blocks = answer_of(reply).content
    thinking, text, recall, bash = blocks
    answer = answer_of(reply, content=[thinking, recall, text, bash])
    final = sdk_final(sim, filtered(events_of(answer)))
    assert [b.model_dump(exclude_none=True) for b in final.content] == [thinking, text, bash]


def test_a_block_start_that_names_its_index_last_is_renumbered_too() -> None:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"

    hidden = {"type": "tool_use", "id": "toolu_1", "name": RECALL_TOOL, "input": {}}
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    search["input"] = {"query": "x", "index": 7}
    hider = DOOR.call_filter(RECALL_TOOL)
    start = {"type": "content_block_start", "index": 0, "content_block": hidden}
    assert hider.event(event("content_block_start", start)) is None
    last = {"type": "content_block_start", "content_block": search, "index": 1}
    shown = hider.event(event("content_block_start", last))
    assert shown is not None
    assert orjson.loads(event_data(shown)) == {**last, "index": 0}


# -- property: any interleaving -----------------------------------------------------------------

BLOCK = st.one_of(
    st.builds(lambda text: {"type": "text", "text": text}, st.text(min_size=1, max_size=50)),
    st.builds(
        lambda name, command: {"type": "tool_use", "name": name, "input": {"command": command}},
        st.sampled_from(["Bash", RECALL_TOOL, "Read"]),
        st.text(max_size=40),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(BLOCK, min_size=1, max_size=8))
def test_filtered_indexes_are_contiguous_and_other_blocks_unchanged(
    drawn: list[dict[str, Any]],
) -> None:
    blocks = [
        {**b, "id": f"toolu_{n:04d}"} if b["type"] == "tool_use" else b for n, b in enumerate(drawn)
    ]
    calls = [b for b in blocks if b["type"] == "tool_use"]
    reply = Reply(tool_calls=[{"name": b["name"]} for b in calls] or None)
    events = events_of(answer_of(reply, content=blocks))
    shown = filtered(events)
    hidden = {n for n, b in enumerate(blocks) if b.get("name") == RECALL_TOOL}
    kept = [n for n in range(len(blocks)) if n not in hidden]
    new_index = {old: new for new, old in enumerate(kept)}

    client_calls = any(blocks[n]["type"] == "tool_use" for n in kept)
    expected = []
    for event in events:
        data = orjson.loads(event_data(event))
        index = data.get("index")
        if index in hidden:
            continue
        if index is not None:
            data["index"] = new_index[index]
        if data["type"] == "message_delta" and hidden and not client_calls:
            data["delta"]["stop_reason"] = "end_turn"
        expected.append(data)
    assert [orjson.loads(event_data(e)) for e in shown] == expected
    # Events before the first hidden block, and the lifecycle ones, pass as the same bytes.
    first_hidden = min(hidden, default=len(blocks))
    unmoved = [
        e
        for e in events
        if orjson.loads(event_data(e)).get("index", -1) < first_hidden
        and not (hidden and e.startswith(b"event: message_delta"))
    ]
    assert all(any(out is e for out in shown) for e in unmoved)
    starts = [orjson.loads(event_data(e))["index"] for e in shown if b"content_block_start" in e]
    assert starts == list(range(len(kept)))
