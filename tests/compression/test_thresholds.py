from __future__ import annotations

import pytest

from compression.options import CompressorOptions
from compression.thresholds import (
    agent_threshold,
    effective_window,
    hygiene_due,
    limits_for,
    summary_budget,
    tail_budget,
)

DEFAULTS = CompressorOptions()


def test_a_128k_model_compresses_at_64000() -> None:
    assert agent_threshold(128_000, DEFAULTS) == 64_000


def test_a_32k_model_compresses_at_85_percent_of_its_window() -> None:
    assert agent_threshold(32_000, DEFAULTS) == int(0.85 * 32_000)


def test_a_64k_window_fires_below_the_floor() -> None:
    assert agent_threshold(64_000, DEFAULTS) == 54_400


def test_large_windows_keep_the_configured_ratio() -> None:
    assert agent_threshold(1_000_000, DEFAULTS) == 500_000
    assert agent_threshold(200_000, CompressorOptions(threshold=0.7)) == 140_000


def test_the_floor_never_pushes_past_85_percent() -> None:
    assert agent_threshold(70_000, DEFAULTS) == int(0.85 * 70_000)
    assert agent_threshold(100_000, DEFAULTS) == 64_000


def test_a_tiny_window_still_gets_a_threshold_below_it() -> None:
    assert agent_threshold(2_000, DEFAULTS) == 1_700
    assert agent_threshold(1, DEFAULTS) == 1


def test_absolute_cap_wins_when_lower() -> None:
    capped = CompressorOptions(threshold_tokens=256_000)
    assert agent_threshold(1_000_000, capped, context_length=1_000_000) == 256_000
    assert agent_threshold(128_000, capped, context_length=128_000) == 64_000


def test_max_tokens_is_reserved_from_the_window() -> None:
    assert effective_window(128_000, 16_000) == 112_000
    assert effective_window(128_000, None) == 128_000
    assert effective_window(8_000, 8_000) == 8_000
    assert effective_window(8_000, 20_000) == 8_000


def test_limits_combine_window_threshold_and_hygiene() -> None:
    limits = limits_for(DEFAULTS, 32_000, 4_000)
    assert limits.window == 28_000
    assert limits.threshold == int(0.85 * 28_000)
    assert limits.hygiene_tokens == int(0.85 * 32_000)
    assert limits.hygiene_messages == 5_000


def test_hygiene_fires_on_tokens_or_message_count() -> None:
    limits = limits_for(CompressorOptions(hygiene_max_messages=10), 100_000, None)
    assert not hygiene_due(84_999, 9, limits)
    assert hygiene_due(85_000, 9, limits)
    assert hygiene_due(10, 10, limits)


@pytest.mark.parametrize(
    ("context_length", "expected"),
    [(128_000, 10_000), (1_000_000, 25_000), (8_000, 1_600), (600_000, 15_000)],
)
def test_lean_tail_budget(context_length: int, expected: int) -> None:
    threshold = agent_threshold(context_length, DEFAULTS)
    assert tail_budget(DEFAULTS, context_length, threshold) == expected


def test_legacy_tail_budget_is_a_share_of_the_threshold() -> None:
    options = CompressorOptions(tail_mode="legacy")
    assert tail_budget(options, 200_000, 100_000) == 20_000


@pytest.mark.parametrize(
    ("summarized", "context_length", "expected"),
    [
        (100_000, 128_000, 6_400),
        (1_000_000, 400_000, 10_000),
        (5_000, 128_000, 2_000),
        (30_000, 1_000_000, 6_000),
    ],
)
def test_summary_budget(summarized: int, context_length: int, expected: int) -> None:
    assert summary_budget(DEFAULTS, summarized, context_length) == expected
