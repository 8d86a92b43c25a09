"""The Responses door's cut at the newest `compaction` item (pure): what the compressor sees,
what renders back, and a body parsed as it grows matching one parsed whole."""

from __future__ import annotations

from typing import Any

import orjson

from compression.messages.content import content_text
from proxy.doors.grown_bodies import GrownBodies
from proxy.doors.responses.compaction_items import HEAD, compaction_cut
from proxy.doors.responses.items import to_messages
from proxy.doors.responses.render import to_items
from proxy.doors.responses.wire import parse_request
from session.ports.frontdoor import ORIGINAL


def compaction(n: int) -> dict[str, Any]:
    return {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"gAAAA{n:04d}" * 50}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "done " * 200}


def test_the_items_up_to_the_newest_compaction_item_are_one_head_message() -> None:
    items = [user("old " * 500), compaction(1), user("older"), compaction(2), user("now")]
    messages = to_messages(items, "Be brief.")
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    head = messages[1]
    assert head[ORIGINAL] == {HEAD: items[:4]}
    assert "old old" not in content_text(head) and "cmp_2" in content_text(head)
    assert to_items(messages) == items  # rendered back as they came


def test_an_output_never_leaves_its_call_behind_the_cut() -> None:
    items = [user("go"), call("c1"), compaction(1), user("meanwhile"), output("c1"), user("now")]
    assert compaction_cut(items) == 5
    messages = to_messages(items, None)
    assert messages[0][ORIGINAL] == {HEAD: items[:5]}
    assert "done done" in content_text(messages[0])  # what the provider reads is counted
    assert compaction_cut([user("go"), call("c1")]) is None


def test_a_growing_body_is_read_as_the_same_body_read_whole() -> None:
    earlier = GrownBodies("input", smallest_bytes=0)
    first = [user("go"), call("c1"), output("c1")]
    second = [*first, compaction(1), user("next"), call("c2")]
    third = [*second, output("c2"), compaction(2), call("c3")]
    fourth = [*third, user("late"), output("c3"), user("end")]  # c3's output joins the head
    bodies = [first, second, third, fourth]
    for items in bodies:
        raw = orjson.dumps({"model": "m", "input": items})
        grown = parse_request(raw, earlier).messages
        whole = parse_request(raw).messages
        assert grown == whole
        assert to_items(grown) == items
