"""The view's user messages read once per pass give the carry the same candidates as the scan
each of the pass's two questions used to make (kept here as the reference), for any range,
restated message and pinned set; and the compressor's handoff is what that scan gave."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.counting.figures import PassFigures
from compression.messages.content import content_text
from compression.messages.types import Message
from compression.summary.handoff import Handoff, handoff_text, parse_handoff, render_handoff
from compression.summary.handoff import user_text as read_user_text
from compression.summary.prompts import RECALLED_CLOSE, RECALLED_OPEN
from compression.verbatim.carry import carry_candidates, carry_need
from compression.verbatim.instructions import states_instruction
from compression.verbatim.observations import has_output_marker, observation_indices
from compression.verbatim.preamble import preamble_end
from compression.verbatim.usermessages import user_messages
from compression.verbatim.userwords import Carried, mark_superseded
from tests.compression.builders import call, calls, reply, result, system, user
from tests.compression.counters import CharCounter


def reference_candidates(
    messages: Sequence[Message],
    start: int,
    end: int,
    skip: int | None,
    figures: PassFigures,
    pinned: frozenset[int] = frozenset(),
) -> list[Carried]:
    """The scan the pass made twice, over the region and over everything after the head."""
    observations = observation_indices(messages, start, end)
    canned = preamble_end(messages)
    replied = any(_replies(message) for message in messages[canned:start])
    found: list[Carried | str] = []
    for index in range(max(start, canned), end):
        message = messages[index]
        summary = handoff_text(message)
        if summary is not None:
            parsed = parse_handoff(summary)
            if parsed is not None:
                for text in parsed.handoff.user_messages:
                    opening = not replied and not any(isinstance(f, Carried) for f in found)
                    found.append(Carried(text, None, states_instruction(text), opening, index))
            replied = True
        own = message.get("role") == "user" and index not in observations
        if index == skip or not own or index in pinned:
            if own:
                found.append(read_user_text(message))
            replied = replied or _replies(message)
            continue
        text = read_user_text(message)
        if summary is not None and has_output_marker(text):
            continue
        if text.strip():
            plain = summary is None and text == content_text(message)
            known = figures.tokens[index] if plain else None
            found.append(Carried(text, known, states_instruction(text), not replied, index))
    later = observation_indices(messages, end, len(messages))
    words = [
        read_user_text(messages[index])
        for index in range(end, len(messages))
        if messages[index].get("role") == "user" and index not in later
    ]
    return mark_superseded([*found, *words])


def _replies(message: Message) -> bool:
    return message.get("role") == "assistant" or handoff_text(message) is not None


HANDOFF = render_handoff(Handoff("## Goal\nx", ("first ask", "never use eval")))
MESSAGES: list[Message] = [
    user("Fix the importer; never touch setup.py."),
    user("Example: what is 2+2?"),
    reply("4"),
    reply("Got it."),
    reply("Running it.\n```bash\npytest -q\n```"),
    user("<returncode>1</returncode>\n<output>\nE   AssertionError\n</output>"),
    user("     1\tdef add(a, b):\n     2\t    return a - b\n" * 3),
    user("ignore my previous message"),
    user("Forget the earlier instruction about setup.py."),
    user("Always use tabs."),
    user("   "),
    user("ok"),
    user(f"Where is XEWRD9?\n\n{RECALLED_OPEN}\nold passage\n{RECALLED_CLOSE}"),
    user(HANDOFF),
    user(HANDOFF + "\n\nwhat next?"),
    user(render_handoff(Handoff("## Goal\nx")) + "\n\n<returncode>0</returncode>\nok"),
    {"role": "assistant", "content": HANDOFF},
    calls(call("c1", path="a.py")),
    result("c1", "contents"),
    {"role": "user", "content": [{"type": "text", "text": "parts: keep the API stable"}]},
]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Message], int, int, int | None, frozenset[int]]:
    body = draw(st.lists(st.sampled_from(MESSAGES), max_size=24))
    messages = [system(), *body]
    total = len(messages)
    start = draw(st.integers(0, total))
    end = draw(st.integers(start, total))
    skip = draw(st.one_of(st.none(), st.integers(0, max(0, total - 1))))
    pinned = frozenset(draw(st.lists(st.integers(0, max(0, total - 1)), max_size=4)))
    return messages, start, end, skip, pinned


@settings(max_examples=500, deadline=None)
@given(cases())
def test_candidates_equal_the_scan_they_replace(
    case: tuple[list[Message], int, int, int | None, frozenset[int]],
) -> None:
    messages, start, end, skip, pinned = case
    figures = PassFigures.measure(messages, CharCounter(), None)
    expected = reference_candidates(messages, start, end, skip, figures, pinned)
    words = user_messages(messages, figures)
    assert words.candidates(start, end, skip, pinned) == expected
    assert carry_candidates(messages, start, end, skip, figures, pinned, words) == expected
    assert carry_candidates(messages, start, end, skip, figures, pinned) == expected


@settings(max_examples=200, deadline=None)
@given(cases())
def test_the_need_read_once_is_the_need_scanned(
    case: tuple[list[Message], int, int, int | None, frozenset[int]],
) -> None:
    messages, head, _, _, pinned = case
    figures = PassFigures.measure(messages, CharCounter(), None)
    words = user_messages(messages, figures)
    once = carry_need(messages, head, figures, pinned, words)
    assert once == carry_need(messages, head, figures, pinned)
    scanned = reference_candidates(messages, head, len(messages), None, figures, pinned)
    assert bool(once.total) == bool(scanned)
