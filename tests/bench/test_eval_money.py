"""The evaluation's money columns: an arm's prompt tokens priced with cache tiers (by hand)."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from bench.evaluation import money
from bench.evaluation.money import STYLES, prompt_split, usd
from session.ledger.tiers import Split


def test_prompt_tokens_priced_with_cache_tiers() -> None:
    openai, anthropic = STYLES
    # 10,000 request tokens, 6,000 of them the previous request's prefix; 2,000 summary tokens.
    assert prompt_split(10_000, 6_000, 2_000, writes=False) == Split(6_000, 6_000, 0, 0)
    assert prompt_split(10_000, 6_000, 2_000, writes=True) == Split(2_000, 6_000, 4_000, 0)
    # gpt-4.1: 6,000 × 2.00 + 6,000 × 0.50 = 15,000 per million.
    assert usd(10_000, 6_000, 2_000, openai) == pytest.approx(0.015)
    # claude-sonnet-4: 2,000 × 3.00 + 6,000 × 0.30 + 4,000 × 3.75 = 22,800 per million.
    assert usd(10_000, 6_000, 2_000, anthropic) == pytest.approx(0.0228)


def test_the_docstring_names_the_module_the_prices_come_from() -> None:
    named = re.findall(r"(\w+(?:/\w+)+)\.py", money.__doc__ or "")
    assert named, "the docstring names no module"
    for path in named:
        module = importlib.import_module(path.replace("/", "."))
        # Defined there, not merely imported there.
        assert re.search(r"^DEFAULT_PRICES\b[^=\n]*=", inspect.getsource(module), re.M), path
