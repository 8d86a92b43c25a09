"""Pinned content: what is recognised, what fits, and that no compression loses it."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compression.compressor import Compressor
from compression.messages.content import content_text
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.verbatim.pins import MIN_KEEP, PIN_MARKER, clip_targets, find_pins, plan_pins
from tests.compression import aider
from tests.compression.builders import context, reply, system, user
from tests.compression.counters import CharCounter
from tests.compression.summarizers import ScriptedSummarizer
from tests.compression.test_properties import transcript

COUNTER = CharCounter()
READ_ONLY = "Here are some READ ONLY files, provided for your reference.\nDo not edit these files!"


def pins_of(messages: list[Message], paste_tokens: int = 1500) -> list[tuple[int, str]]:
    tokens = [COUNTER.count_message(m) for m in messages]
    found = find_pins(messages, tokens, paste_tokens, COUNTER.count_text)
    return [(pin.index, pin.kind) for pin in found]


def files_message(text: str) -> Message:
    return user(aider.FILES_PREFIX + "net/client.py\n```\n" + text + "\n```")


def test_aiders_files_are_pinned_even_after_an_edit_block() -> None:
    # An aider reply holds a fenced edit; the files message after it reads like command output
    # to the text-agent rule, but its prefix says what it is.
    messages = aider.request(["one", "two", "three"], file_text="x = 1\n" * 50)
    at = next(i for i, m in enumerate(messages) if content_text(m).startswith(aider.FILES_PREFIX))
    assert pins_of(messages) == [(at, "files")]


def test_read_only_files_in_the_opening_and_a_marker_are_pinned() -> None:
    messages = [
        system(),
        user(READ_ONLY + "\ndocs/api.md\n```\nGET /v1/items\n```"),
        reply("Ok, I will use these files as references."),
        user(f"{PIN_MARKER} the schema: id, name"),
        reply("Noted."),
        user("go"),
    ]
    assert pins_of(messages) == [(1, "read-only"), (3, "marker")]


def test_a_paste_is_pinned_but_not_command_output_nor_the_newest_message() -> None:
    big = "a pasted log line that goes on\n" * 300
    messages = [
        system(),
        user("Here is the log:\n" + big),
        reply("Let me run it.\n```bash\nmake test\n```"),
        user("<returncode>1</returncode>\n<output>\n" + big + "</output>"),
        reply("It fails."),
        user("And the spec:\n" + big),
    ]
    assert pins_of(messages) == [(1, "paste")]
    assert pins_of(messages, paste_tokens=0) == []


def test_only_the_newest_copy_is_pinned() -> None:
    messages = [
        system(),
        files_message("old = 1"),
        reply(aider.FILES_ACK),
        user("first"),
        reply("done"),
        files_message("new = 2"),
        reply(aider.FILES_ACK),
        user("second"),
    ]
    assert pins_of(messages) == [(5, "files")]


def test_pins_over_the_budget_are_clipped_and_far_over_it_refused() -> None:
    body = "\n".join(f"line {n} of the file" for n in range(400))
    messages = [system(), files_message(body), reply(aider.FILES_ACK), user("edit it")]
    tokens = [COUNTER.count_message(m) for m in messages]
    found = find_pins(messages, tokens, 1500, COUNTER.count_text)
    size = found[0].tokens
    whole = plan_pins(found, size, COUNTER.count_message)
    assert whole.pins[0].message is messages[1] and whole.clipped == ()
    budget = int(size * 0.7)
    clipped = plan_pins(found, budget, COUNTER.count_message)
    (report,) = clipped.clipped
    assert report.index == 1 and report.original_tokens == size
    assert size * MIN_KEEP <= report.kept_tokens <= budget
    text = content_text(clipped.pins[0].message)
    assert text.startswith(aider.FILES_PREFIX) and text.endswith("line 399 of the file\n```")
    refused = plan_pins(found, int(size * MIN_KEEP) - 1, COUNTER.count_message)
    assert refused.pins == () and refused.refused is not None
    assert "aider's added files (message 1" in refused.refused and "/drop" in refused.refused


def test_the_largest_pins_are_cut_first_and_none_below_half() -> None:
    assert clip_targets([9000, 200, 800], 6000) == [5000, 200, 800]
    assert clip_targets([4000, 4000], 6000) == [3000, 3000]
    assert clip_targets([9000, 3000], 6000) == [4500, 1500]  # both at their floor
    assert sum(clip_targets([5000, 1000], 3481)) <= 3481


def test_a_paste_that_does_not_fit_is_released_not_clipped() -> None:
    big = "pasted spec text\n" * 500
    messages = [system(), user(big), reply("read"), user(big + "v2"), reply("read"), user("go")]
    tokens = [COUNTER.count_message(m) for m in messages]
    found = find_pins(messages, tokens, 1500, COUNTER.count_text)
    plan = plan_pins(found, tokens[3] + 10, COUNTER.count_message)
    assert [pin.index for pin in plan.pins] == [3]  # the newest that fits; never a clip
    assert plan.refused is None and plan.clipped == ()


@st.composite
def pinned_transcript(draw: st.DrawFn) -> tuple[list[Message], list[str]]:
    """A generated transcript with pinned messages put before some of its user turns (never
    the newest), and the texts pinned."""
    messages = draw(transcript())
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and i > 0][:-1]
    chosen = draw(st.lists(st.sampled_from(starts), unique=True, max_size=3)) if starts else []
    texts: list[str] = []
    for number, at in enumerate(sorted(chosen, reverse=True)):
        size = draw(st.sampled_from([40, 800, 4_000, 12_000, 40_000]))
        body = "".join(f"pinned {number} line {n}\n" for n in range(size // 20))
        text = draw(st.sampled_from([f"{PIN_MARKER} doc {number}\n", aider.FILES_PREFIX])) + body
        if text.startswith(aider.FILES_PREFIX) and any(t.startswith(text[:40]) for t in texts):
            continue  # aider sends one files message: only its newest copy is pinned
        messages[at:at] = [user(text), reply("Ok.")]
        texts.append(text)
    return messages, texts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=pinned_transcript(),
    context_length=st.sampled_from([8_000, 16_000, 32_000]),
    force=st.booleans(),
)
async def test_every_pin_is_kept_verbatim_or_reported_clipped(
    case: tuple[list[Message], list[str]], context_length: int, force: bool
) -> None:
    messages, pinned = case
    before = copy.deepcopy(messages)
    ctx = context(
        summarize=ScriptedSummarizer(),
        context_length=context_length,
        force=force,
        now=1.0,
    )
    out = await Compressor(CompressorOptions()).compress(messages, ctx)
    event(f"{out.outcome}, {len(out.clipped)} clipped")
    assert messages == before
    held = [content_text(m) for m in out.messages]
    clipped = {clip.index for clip in out.clipped}
    for text in pinned:
        at = next(i for i, m in enumerate(messages) if content_text(m) == text)
        if any(text in h for h in held):
            continue
        assert at in clipped, f"pinned message {at} is neither kept nor reported clipped"
        assert any(text[:60] in h and text[-60:] in h for h in held)
    # The handoff also reports the user's words and the file reads it carries clipped (or by
    # handle only): user messages and tool results.
    positions = {
        i
        for i, m in enumerate(messages)
        if content_text(m) in pinned or m["role"] in ("user", "tool")
    }
    assert clipped <= positions
