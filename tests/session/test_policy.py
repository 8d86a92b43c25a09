"""The compression policy, event by event, with literal figures."""

from __future__ import annotations

import pytest

from compression.state import EngineState
from compression.thresholds import Limits
from session.overflow import Overflow
from session.policy import (
    Answered,
    Arrival,
    Asked,
    AwaitJob,
    Compress,
    GiveUp,
    LowerMaxTokens,
    Nothing,
    Refused,
    Rules,
    decide,
    probed_window,
)

LIMITS = Limits(
    context_length=10_000,
    window=9_000,
    threshold=5_000,
    hygiene_tokens=8_500,
    hygiene_messages=100,
)
FOREGROUND = Rules(background=False, max_attempts=3)
BACKGROUND = Rules(background=True, max_attempts=3)
FREE = EngineState()
BLOCKED = EngineState(cooldown_until=2_000.0)


def arrival(tokens: int | None, **given: object) -> Arrival:
    fields: dict[str, object] = {
        "exact": True,
        "messages": 10,
        "pending": False,
        "job_running": False,
    }
    fields.update(given)
    return Arrival(tokens=tokens, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("event", "rules", "state", "expected"),
    [
        (arrival(None), FOREGROUND, FREE, Nothing("under the threshold")),
        (arrival(4_999), FOREGROUND, FREE, Nothing("under the threshold")),
        (arrival(5_000), FOREGROUND, FREE, Compress("preflight", current_tokens=5_000)),
        (
            arrival(5_000, exact=False),
            BACKGROUND,
            FREE,
            Compress("preflight", current_tokens=5_000),
        ),
        (arrival(5_000), BACKGROUND, FREE, Nothing("left to the background compression")),
        (
            arrival(6_000, pending=True),
            FOREGROUND,
            FREE,
            Nothing("awaiting the real figure of the last compression"),
        ),
        (arrival(8_500), BACKGROUND, BLOCKED, Compress("hygiene", current_tokens=8_500)),
        (arrival(None, messages=100), BACKGROUND, FREE, Compress("hygiene")),
        (arrival(9_000, job_running=True), BACKGROUND, FREE, AwaitJob()),
        (
            arrival(9_000, job_running=True, after_job=True),
            BACKGROUND,
            FREE,
            Compress("hygiene", current_tokens=9_000),
        ),
        (
            arrival(6_000, exact=True, after_job=True),
            FOREGROUND,
            FREE,
            Nothing("left to the background compression"),
        ),
    ],
)
def test_arrival(event: Arrival, rules: Rules, state: EngineState, expected: object) -> None:
    assert decide(event, LIMITS, state, now=1_000.0, rules=rules) == expected


def test_arrival_during_a_cooldown_waits_unless_hygiene() -> None:
    action = decide(arrival(6_000, exact=False), LIMITS, BLOCKED, now=1_000.0, rules=FOREGROUND)
    assert isinstance(action, Nothing) and "cool" in action.reason
    after = decide(arrival(6_000, exact=False), LIMITS, BLOCKED, now=3_000.0, rules=FOREGROUND)
    assert after == Compress("preflight", current_tokens=6_000)


def answered(tokens: int, **given: bool) -> Answered:
    fields = {"compressed_now": False, "superseded": False, "job_running": False}
    fields.update(given)
    return Answered(prompt_tokens=tokens, **fields)


@pytest.mark.parametrize(
    ("event", "rules", "expected"),
    [
        (
            answered(5_000),
            BACKGROUND,
            Compress("post_response", current_tokens=5_000, background=True),
        ),
        (answered(4_999), BACKGROUND, Nothing("under the threshold")),
        (answered(7_000), FOREGROUND, Nothing("under the threshold")),
        (answered(7_000, compressed_now=True), BACKGROUND, Nothing("already compressed")),
        (answered(7_000, superseded=True), BACKGROUND, Nothing("already compressed")),
        (answered(7_000, job_running=True), BACKGROUND, Nothing("a compression is under way")),
    ],
)
def test_answer(event: Answered, rules: Rules, expected: object) -> None:
    assert decide(event, LIMITS, FREE, now=1_000.0, rules=rules) == expected


def test_answer_during_a_cooldown_does_nothing() -> None:
    action = decide(answered(7_000), LIMITS, BLOCKED, now=1_000.0, rules=BACKGROUND)
    assert isinstance(action, Nothing) and action.reason != "under the threshold"


def overflow(window: int | None = None, prompt: int | None = None) -> Overflow:
    return Overflow("prompt", window, prompt, "too long")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (Refused(overflow(), 0, None), Compress("overflow", force=True)),
        (
            Refused(overflow(10_000, 12_000), 1, 1_000),
            Compress("overflow", force=True, current_tokens=12_000),
        ),
        # The prompt fits; the reservation does not: 1,500 of room, less a 2 % margin.
        (Refused(overflow(10_000, 8_500), 0, 4_000), LowerMaxTokens(1_470)),
        # Too little room left for an answer: compress instead.
        (
            Refused(overflow(10_000, 9_990), 0, 4_000),
            Compress("overflow", force=True, current_tokens=9_990),
        ),
        (Refused(overflow(), 3, None), GiveUp("still too large after 3 forced compressions")),
    ],
)
def test_refusal(event: Refused, expected: object) -> None:
    assert decide(event, LIMITS, FREE, now=1_000.0, rules=FOREGROUND) == expected


def test_asked() -> None:
    action = decide(Asked("the parser"), LIMITS, BLOCKED, now=1_000.0, rules=BACKGROUND)
    assert action == Compress("manual", force=True, focus="the parser")


@pytest.mark.parametrize(
    ("failing", "context_length", "expected"),
    [
        (40_000, 128_000, 32_000),
        (32_000, 128_000, 16_000),
        (9_000, 8_192, 8_000),
        (8_000, 8_000, 4_000),
        (200_000, 128_000, None),  # the tier under it is no smaller than the window assumed
        (900, 128_000, None),
    ],
)
def test_a_numberless_refusal_steps_the_window_down_the_probe_tiers(
    failing: int, context_length: int, expected: int | None
) -> None:
    assert probed_window(failing, context_length) == expected
