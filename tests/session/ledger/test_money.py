"""Savings in money: a recorded session's charges priced and summed, checked against the same
figures worked by hand (in the comments), for OpenAI-style and Anthropic-style pricing.

The session is recorded through the ledger into a real SQLite file, and read back the way the
admin API reads it (grouped sums, prices applied on reading).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.config_file import parse_settings
from proxy.doors.chat.chat_door import ChatDoor
from session.config.prices import Price
from session.config.settings import Settings
from session.ledger.book import Ledger
from session.ledger.savings import savings_json
from session.ledger.tiers import Split, cost, full_history_split, split_of
from session.ports.frontdoor import Usage
from storage import SessionKey, SessionStore

SK = SessionKey("scope", "session")
PRICES = [
    # OpenAI style: cached input at a quarter, no cache-write price (written at `input`).
    {"match": "gpt-test*", "input": 2.00, "cached_input": 0.50, "output": 8.00},
    # Anthropic style: cache reads at 10%, cache writes at 125%.
    {
        "match": "claude-test*",
        "input": 3.00,
        "cached_input": 0.30,
        "cache_write": 3.75,
        "output": 15.00,
    },
]


def settings_with(prices: list[dict[str, Any]] | None) -> Settings:
    doc: dict[str, Any] = {
        "upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
        "models": [{"match": "*"}],
    }
    if prices is not None:
        doc["prices"] = prices
    return parse_settings(doc, {})


def test_a_call_priced_by_tier() -> None:
    price = Price("m", input=3.00, cached_input=0.30, cache_write=3.75, output=15.00)
    # Anthropic's usage: input_tokens 100 (after the breakpoint), 1,900 written, 1,000 read.
    split = split_of(Usage(3000, 50, cache_read=1000, cache_write=1900))
    assert split == Split(uncached=100, cache_read=1000, cache_write=1900, output=50)
    # 100×3 + 1,000×0.30 + 1,900×3.75 + 50×15 = 300 + 300 + 7,125 + 750 = 8,475 per million
    assert cost(split, price) == pytest.approx(0.008475)


def test_the_doors_read_the_cached_tier() -> None:
    answer = {
        "choices": [],
        "usage": {
            "prompt_tokens": 3000,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 2048},
        },
    }
    usage = ChatDoor().usage(orjson.dumps(answer))
    assert usage == Usage(3000, 20, cache_read=2048)
    assert split_of(usage) == Split(952, 2048, 0, 20)


def test_the_full_history_counterfactual_turn_by_turn() -> None:
    # Automatic caching (OpenAI): the previous 3,000-token prompt is the stable prefix,
    # cached in 128-token steps: 3,000 // 128 × 128 = 2,944; the other 1,056 are fresh.
    assert full_history_split(3000, 4000, 7, "automatic") == Split(1056, 2944, 0, 7)
    # Under 1,024 tokens nothing is cached.
    assert full_history_split(1000, 1200, 7, "automatic") == Split(1200, 0, 0, 7)
    # Explicit caching (Anthropic): the prefix read, the rest written.
    assert full_history_split(3000, 4000, 7, "explicit") == Split(0, 3000, 1000, 7)
    # No previous prompt within the cache's life: written (explicit) or fresh (automatic).
    assert full_history_split(None, 4000, 7, "explicit") == Split(0, 0, 4000, 7)
    assert full_history_split(None, 4000, 7, "automatic") == Split(4000, 0, 0, 7)
    assert full_history_split(3000, 4000, 7, "none") == Split(4000, 0, 0, 7)


async def test_openai_style_session_by_hand(store: SessionStore) -> None:
    ledger = Ledger(settings_with(PRICES), store, clock=lambda: 1000.0)
    model, api = "gpt-test-1", "chat"
    # t=0 and t=60: forwarded as sent (their own counterfactual).
    await ledger.request(SK, model, api, Usage(2000, 100), 2000, False, 0.0)
    await ledger.request(SK, model, api, Usage(3000, 100, cache_read=1920), 3000, False, 60.0)
    # The compression's summary call and, later, one recall round.
    await ledger.overhead(SK, model, "summary", Usage(2500, 400))
    await ledger.overhead(SK, model, "recall", Usage(1400, 30, cache_read=1152))
    # t=120: the compressed view (1,200 tokens, nothing cached: its prefix is new); the
    # uncompressed history would have been 4,000 tokens, with t=60's 3,000 as cached prefix:
    # 2,944 cached (128-token steps), 1,056 fresh.
    await ledger.request(SK, model, api, Usage(1200, 100), 4000, True, 120.0)
    # t=180: 1,500 billed, 1,152 of them cached; full history 4,300, prefix 4,000 → 3,968
    # cached, 332 fresh.
    await ledger.request(SK, model, api, Usage(1500, 100, cache_read=1152), 4300, True, 180.0)

    figures = savings_json(await store.charge_groups([SK]), ledger.settings.price_for)
    total = figures["total"]
    assert isinstance(total, dict)
    # Billed requests: fresh 2,000 + 1,080 + 1,200 + 348 = 4,628; cached 1,920 + 1,152 = 3,072;
    # output 400.  Plus the summary (2,500 fresh, 400 out) and the recall round (248 fresh,
    # 1,152 cached, 30 out).
    assert total["billed_tokens"] == {
        "uncached": 4628 + 2500 + 248,
        "cache_read": 3072 + 1152,
        "cache_write": 0,
        "output": 400 + 400 + 30,
        "prompt": 4628 + 2500 + 248 + 3072 + 1152,
    }
    # Full history: fresh 2,000 + 1,080 + 1,056 + 332 = 4,468; cached 1,920 + 2,944 + 3,968
    # = 8,832; output 400.
    assert total["full_history_tokens"] == {
        "uncached": 4468,
        "cache_read": 8832,
        "cache_write": 0,
        "output": 400,
        "prompt": 13300,
    }
    # Tokens: full 13,700 against billed 8,100 + 2,900 + 1,430 = 12,430: 1,270 saved.
    assert total["tokens_saved"] == 1270
    # Money (per million): requests 4,628×2 + 3,072×0.5 + 400×8 = 13,992; summary
    # 2,500×2 + 400×8 = 8,200; recall 248×2 + 1,152×0.5 + 30×8 = 1,312; billed 23,504.
    # Full history 4,468×2 + 8,832×0.5 + 400×8 = 16,552: compression lost 6,952, because
    # the compressed prefixes were no longer cached and the summary call cost more than
    # two short turns saved.
    assert total["billed_usd"] == pytest.approx(0.023504)
    assert total["full_history_usd"] == pytest.approx(0.016552)
    assert total["usd_saved"] == pytest.approx(-0.006952)
    assert total["overhead_usd"] == {
        "recall": pytest.approx(0.001312),
        "summary": pytest.approx(0.0082),
    }
    # Cache hits: before compressions 1,920 of 5,000 prompt tokens; after, 1,152 of 2,700.
    assert total["cache_hit_ratio_before"] == pytest.approx(1920 / 5000)
    assert total["cache_hit_ratio_after"] == pytest.approx(1152 / 2700)
    assert total["unpriced_models"] == []


async def test_anthropic_style_session_by_hand(store: SessionStore) -> None:
    ledger = Ledger(settings_with(PRICES), store, clock=lambda: 1000.0)
    model, api = "claude-test-4", "messages"

    def usage(fresh: int, read: int, written: int) -> Usage:
        return Usage(fresh + read + written, 50, cache_read=read, cache_write=written)

    # t=0: 20,000 tokens, 19,900 written up to the breakpoint, 100 after it.
    await ledger.request(SK, model, api, usage(100, 0, 19900), 20000, False, 0.0)
    # t=60: 30,000: 19,900 read, 10,000 written, 100 fresh.
    await ledger.request(SK, model, api, usage(100, 19900, 10000), 30000, False, 60.0)
    await ledger.overhead(SK, model, "summary", Usage(28000, 500))
    # t=120: compressed to 6,000, its new prefix written (5,900); the uncompressed 32,000
    # would have read t=60's 30,000 and written 2,000.
    await ledger.request(SK, model, api, usage(100, 0, 5900), 32000, True, 120.0)
    # t=180: 8,000 billed (5,900 read, 2,000 written); uncompressed 34,000: 32,000 read,
    # 2,000 written.
    await ledger.request(SK, model, api, usage(100, 5900, 2000), 34000, True, 180.0)

    figures = savings_json(await store.charge_groups([SK]), ledger.settings.price_for)
    total = figures["total"]
    assert isinstance(total, dict)
    # Billed requests: fresh 400, read 25,800, written 37,800, output 200; summary 28,000
    # fresh, 500 out.
    assert total["billed_tokens"] == {
        "uncached": 400 + 28000,
        "cache_read": 25800,
        "cache_write": 37800,
        "output": 700,
        "prompt": 28400 + 25800 + 37800,
    }
    # Full history: fresh 200, read 19,900 + 30,000 + 32,000 = 81,900, written 19,900 +
    # 10,000 + 2,000 + 2,000 = 33,900, output 200.
    assert total["full_history_tokens"] == {
        "uncached": 200,
        "cache_read": 81900,
        "cache_write": 33900,
        "output": 200,
        "prompt": 116000,
    }
    # Tokens: full 116,200 against billed 64,200 + 28,500 = 92,700: 23,500 saved.
    assert total["tokens_saved"] == 23500
    # Money (per million): requests 400×3 + 25,800×0.30 + 37,800×3.75 + 200×15 = 1,200 +
    # 7,740 + 141,750 + 3,000 = 153,690; summary 28,000×3 + 500×15 = 91,500; billed 245,190.
    # Full history 200×3 + 81,900×0.30 + 33,900×3.75 + 200×15 = 600 + 24,570 + 127,125 +
    # 3,000 = 155,295. Tokens saved, money lost: 89,895 (rewritten prefixes pay 125%).
    assert total["billed_usd"] == pytest.approx(0.24519)
    assert total["full_history_usd"] == pytest.approx(0.155295)
    assert total["usd_saved"] == pytest.approx(-0.089895)
    # Cache hits: before 19,900 of 50,000; after 5,900 of 14,000.
    assert total["cache_hit_ratio_before"] == pytest.approx(19900 / 50000)
    assert total["cache_hit_ratio_after"] == pytest.approx(5900 / 14000)
    models = figures["models"]
    assert isinstance(models, dict) and list(models) == [model]
    assert models[model]["usd_saved"] == pytest.approx(-0.089895)


async def test_a_model_without_a_price_shows_tokens_only(store: SessionStore) -> None:
    ledger = Ledger(settings_with(PRICES), store, clock=lambda: 1000.0)
    await ledger.request(SK, "local-llama", "chat", Usage(2000, 10), 2000, False, 0.0)
    await ledger.request(SK, "local-llama", "chat", Usage(800, 10), 2500, True, 60.0)
    await ledger.request(SK, "gpt-test-1", "chat", Usage(1000, 10), 1000, False, 90.0)
    figures = savings_json(await store.charge_groups(), ledger.settings.price_for)
    models = figures["models"]
    assert isinstance(models, dict)
    local = models["local-llama"]
    # 2,000 + 2,500 + 20 would have been billed; 2,000 + 800 + 20 were: 1,700 saved.
    assert local["tokens_saved"] == 1700
    # Its server never reported a cached token: the full history is not credited with one.
    assert local["full_history_tokens"]["cache_read"] == 0
    assert local["billed_usd"] is None and local["usd_saved"] is None
    assert local["unpriced_models"] == ["local-llama"]
    # The total's money covers the priced model only, and names the other.
    total = figures["total"]
    assert isinstance(total, dict)
    assert total["unpriced_models"] == ["local-llama"]
    assert total["billed_usd"] == pytest.approx((1000 * 2.00 + 10 * 8.00) / 1e6)
    assert total["tokens_saved"] == 1700


def test_prices_default_edit_and_refuse() -> None:
    defaults = settings_with(None)
    sonnet = defaults.price_for("claude-sonnet-4-5-20250929")
    assert sonnet is not None and sonnet.cache_write == 3.75
    mini = defaults.price_for("gpt-4.1-mini-2025-04-14")
    assert mini is not None and mini.input == 0.40
    assert defaults.price_for("my-local-model") is None
    # An edited list replaces the defaults; unset cached/write prices are the input price.
    edited = settings_with([{"match": "gpt-4.1*", "input": 1.0, "output": 4.0}])
    price = edited.price_for("gpt-4.1-mini")
    assert price == Price("gpt-4.1*", 1.0, 1.0, 1.0, 4.0)
    assert edited.price_for("claude-sonnet-4") is None
    assert settings_with([]).price_for("gpt-4o") is None
    with pytest.raises(ValueError, match=r"prices\[0\]\.output: required"):
        settings_with([{"match": "x", "input": 1.0}])
    with pytest.raises(ValueError, match=r"prices\[0\]\.input: must be 0 or more"):
        settings_with([{"match": "x", "input": -1.0, "output": 1.0}])
