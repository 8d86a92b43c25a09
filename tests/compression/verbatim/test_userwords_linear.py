"""The user-words picker in linear time: the same answers as the quadratic scans it replaced
(kept here as the reference), and 100,000 one-word messages in well under a second."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from compression.verbatim.instructions import states_instruction, supersedes
from compression.verbatim.userwords import Carried, mark_superseded, select_carried


def reference_mark_superseded(messages: Sequence[Carried | str]) -> list[Carried]:
    """The scan each message used to make back over every earlier one."""
    out: list[Carried | str] = list(messages)
    for later, message in enumerate(messages):
        kind = supersedes(message if isinstance(message, str) else message.text)
        if kind is None:
            continue
        for at in range(later - 1, -1, -1):
            earlier = out[at]
            text = earlier if isinstance(earlier, str) else earlier.text
            rule = earlier.instruction if isinstance(earlier, Carried) else states_instruction(text)
            if kind == "message" or rule:
                if isinstance(earlier, Carried) and not earlier.opening:
                    out[at] = replace(earlier, superseded=True)
                break
    return [m for m in out if not isinstance(m, str)]


WORDS = st.sampled_from(
    [
        "fix the bug",
        "always use tabs",
        "never commit to main",
        "ignore my previous message",
        "forget the earlier instruction",
        "ok",
        "thanks",
        "run the tests",
    ]
)
CANDIDATES = st.builds(
    Carried,
    text=WORDS,
    instruction=st.booleans(),
    opening=st.booleans(),
)
MESSAGES = st.lists(st.one_of(CANDIDATES, WORDS), max_size=40)


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_marking_equals_the_old_scan(messages: list[Carried | str]) -> None:
    assert mark_superseded(messages) == reference_mark_superseded(messages)


def words(text: str) -> int:
    return len(text.split())


@settings(max_examples=300, deadline=None)
@given(st.lists(CANDIDATES, max_size=30), st.integers(min_value=0, max_value=400))
def test_a_repeat_is_left_out_as_if_never_sent(candidates: list[Carried], budget: int) -> None:
    numbered = [replace(c, index=i) for i, c in enumerate(candidates)]
    seen: set[str] = set()
    firsts = []
    for c in numbered:
        if c.text not in seen:
            firsts.append(c)
        seen.add(c.text)
    assert select_carried(numbered, budget, words) == select_carried(firsts, budget, words)


def test_a_hundred_thousand_one_word_messages_take_linear_time() -> None:
    def run(n: int) -> float:
        found = [Carried(f"w{i % (n // 2)}", tokens=1, index=i) for i in range(n)]
        started = time.perf_counter()
        marked = mark_superseded([*found, "forget the earlier instruction"])
        select_carried(marked, n, words)
        return time.perf_counter() - started

    small, large = run(10_000), run(100_000)
    # Ten times the messages: about ten times the time (the quadratic scans took 100x).
    assert large < max(small, 0.01) * 30
    assert large < 5.0
