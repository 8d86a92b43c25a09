"""Handles: every client message a compression replaces is named in the view it leaves."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compression.compressor import Compressor
from compression.engine import SummaryReply
from compression.messages.content import clip_middle
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handles import (
    clipped_originals,
    parse_handles,
    ranges,
    rewritten_suffix,
    with_handles,
    without_archive_line,
)
from compression.summary.handoff import Handoff, handoff_text, parse_handoff, render_handoff
from compression.summary.prompts import END_MARKER, SUMMARY_PREFIX
from session.provenance import replaced_positions, replacement
from tests.compression.builders import context, text_of
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer
from tests.compression.test_properties import SCRIPTS, transcript

ENGINE = Compressor(CompressorOptions())
_NAMED = re.compile(r"m\d+(?:-m\d+)?")


def named(messages: list[Message]) -> set[int]:
    """Every position a handle in the view's text names."""
    found: set[int] = set()
    for message in messages:
        text = text_of(message)
        for line in re.findall(r"\[Archived originals: ([^\]]*?) —", text):
            for span in _NAMED.findall(line):
                found.update(parse_handles(span, limit=10**6) or [])
        found.update(int(p) for p in re.findall(r"\[archived: m(\d+)\]", text))
    return found


def test_ranges_and_handles_read_back() -> None:
    assert ranges([9, 2, 3, 4, 5, 11, 12]) == "m2-m5, m9, m11-m12"
    assert parse_handles("m12-m15") == [12, 13, 14, 15]
    assert parse_handles(" m7 ") == [7]
    assert parse_handles("m15-m12") == [12, 13, 14, 15]
    assert parse_handles("seven") is None
    assert parse_handles("m1-m1000", limit=3) == [1, 2, 3]


def test_a_summary_reads_back_without_its_archive_line() -> None:
    text = f"{SUMMARY_PREFIX}\n\n## Goal\nship it\n\n{END_MARKER}\nthe tail's own text"
    summary: Message = {"role": "user", "content": text}
    tool: Message = {"role": "tool", "tool_call_id": "c1", "content": "short"}
    client: list[Message] = [
        {"role": "system", "content": "s"},
        {"role": "tool", "tool_call_id": "c1", "content": "a long output"},
        {"role": "user", "content": "u"},
    ]
    out = with_handles([client[0], summary, tool], [0, None, None], [1, 2], client)
    assert out[0] is client[0]
    assert out[2]["content"] == "short" + rewritten_suffix(1)
    assert out[1]["content"].startswith(f"{SUMMARY_PREFIX}\n[Archived originals: m1-m2 —")
    parsed = parse_handoff(handoff_text(out[1]) or "")
    assert parsed is not None and parsed.handoff.body == "## Goal\nship it"
    assert parsed.remainder == "the tail's own text"
    assert without_archive_line(out[1]["content"].removeprefix(SUMMARY_PREFIX + "\n")).startswith(
        "\n## Goal"
    )
    again = with_handles(out, [0, None, None], [1, 2], client)
    assert again[1]["content"] == out[1]["content"]  # no second line
    assert again[2]["content"] == out[2]["content"]  # no second suffix


def test_a_clipped_user_message_the_summary_carries_names_its_original() -> None:
    ask = "Keep the public API stable. " + "background " * 300 + "Ship by Friday."
    clipped = clip_middle(ask, 200)
    summary: Message = {
        "role": "user",
        "content": render_handoff(Handoff("## Goal\nship it", ("short ask", clipped))),
    }
    client: list[Message] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "short ask"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ask},
        {"role": "assistant", "content": "done"},
    ]
    out = with_handles([client[0], summary, client[4]], [0, None, 4], [1, 2, 3], client)
    parsed = parse_handoff(handoff_text(out[1]) or "")
    assert parsed is not None
    assert parsed.handoff.user_messages == ("short ask", clipped + rewritten_suffix(3))
    again = with_handles(out, [0, None, 4], [1, 2, 3], client)
    assert again[1]["content"] == out[1]["content"]  # named once


def test_a_clip_is_named_after_the_message_it_was_cut_from_where_several_open_alike() -> None:
    """An agent's task template opens every statement alike: the clip's head and tail name
    the one it was cut from, not the newest that opens the same way."""
    opening = "We're currently solving the following issue within our repository. ISSUE:\n"
    first = opening + "SyntaxError in missing_colon.py. " + "detail " * 200 + "Fix it."
    later = opening + "TimeDelta serialization precision. " + "detail " * 200 + "Round it."
    clipped = clip_middle(first, 300)
    summary: Message = {
        "role": "user",
        "content": render_handoff(Handoff("## Goal\nship it", (clipped,))),
    }
    client: list[Message] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": first},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": later},
        {"role": "assistant", "content": "done"},
    ]
    out = with_handles([client[0], summary, client[4]], [0, None, 4], [1, 2, 3], client)
    parsed = parse_handoff(handoff_text(out[1]) or "")
    assert parsed is not None
    assert parsed.handoff.user_messages == (clipped + rewritten_suffix(1),)
    assert clipped_originals(out, client) == {clipped + rewritten_suffix(1): first}
    # Named for the wrong message (by an older ctxgate), the clip is not read back as it.
    wrong = {
        "role": "user",
        "content": render_handoff(Handoff("g", (clipped + rewritten_suffix(3),))),
    }
    assert clipped_originals([client[0], wrong], client) == {}


def test_a_clipped_carried_message_is_read_back_whole_from_the_clients_list() -> None:
    """The client resends the original with every request: the next compression reads the
    clip's original from it, by the handle written into the clip, and nothing else."""
    ask = "Keep the public API stable. " + "background " * 300 + "Ship by Friday."
    clip = clip_middle(ask, 200) + rewritten_suffix(3)
    bare = clip_middle("Other words entirely. " + "x " * 300, 200)
    summary: Message = {
        "role": "user",
        "content": render_handoff(Handoff("## Goal\nship it", ("short ask", clip, bare))),
    }
    client: list[Message] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "short ask"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ask},
    ]
    view = [client[0], summary]
    assert clipped_originals(view, client) == {clip: ask}
    # A handle past the client's list, or naming a message that does not open like the clip
    # (the client edited its history), gives nothing back.
    assert clipped_originals(view, client[:3]) == {}
    edited = [*client[:3], {"role": "user", "content": "Something else. " + "y " * 300}]
    assert clipped_originals(view, edited) == {}
    assert clipped_originals(view, [*client[:3], {"role": "assistant", "content": ask}]) == {}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=transcript(),
    step=SCRIPTS,
    context_length=st.sampled_from([8_000, 16_000]),
)
async def test_every_replaced_message_is_named_in_the_view(
    messages: list[Message], step: SummaryReply | BaseException, context_length: int
) -> None:
    ctx = context(
        summarize=ScriptedSummarizer(step),
        context_length=context_length,
        counter=CharCounter(),
        force=True,
        now=1.0,
    )
    out = await ENGINE.compress(messages, ctx)
    origins: tuple[Any, ...] = tuple(range(len(messages)))
    done = replacement(messages, out.messages, origins)
    gone = replaced_positions(len(messages), done.sources)
    view = with_handles(out.messages, done.sources, gone, messages)
    event(f"replaced {'some' if gone else 'none'}")
    assert named(view) >= set(gone)
    assert all(
        view[i] is out.messages[i] for i, source in enumerate(done.sources) if source is not None
    )
    # A second compression of the annotated view names the union, never a stale line twice.
    assert all(text_of(m).count("[Archived originals:") <= 1 for m in view)
