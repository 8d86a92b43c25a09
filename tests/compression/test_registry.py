from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compression import ENGINES, Compressor, PassthroughEngine, engine_limits, load_engine
from compression.options import CompressorOptions
from tests.compression.builders import agent_session, context


class CustomEngine:
    name = "custom"

    def __init__(self, level: int = 1) -> None:
        self.level = level

    async def compress(self, messages: object, ctx: object) -> object:
        raise NotImplementedError


def test_short_names_load_the_built_in_engines() -> None:
    assert set(ENGINES) == {"compressor", "passthrough"}
    engine = load_engine("compressor", {"threshold": 0.6, "protect_last_n": 4})
    assert isinstance(engine, Compressor)
    assert engine.options.threshold == 0.6 and engine.options.protect_last_n == 4
    assert isinstance(load_engine("passthrough", {}), PassthroughEngine)


def test_the_compressor_takes_checked_options_as_they_are() -> None:
    options = CompressorOptions(threshold=0.6)
    engine = load_engine("compressor", options)
    assert isinstance(engine, Compressor) and engine.options is options
    with pytest.raises(ValueError, match="takes a mapping of its own options"):
        load_engine("passthrough", options)


def test_an_import_string_loads_a_custom_engine() -> None:
    engine = load_engine("tests.compression.test_registry:CustomEngine", {"level": 3})
    assert isinstance(engine, CustomEngine) and engine.level == 3


def test_an_unknown_engine_names_the_choices() -> None:
    with pytest.raises(
        ValueError, match="unknown compression engine 'summarizer'.*compressor, passthrough"
    ):
        load_engine("summarizer", {})
    with pytest.raises(ValueError, match="cannot import"):
        load_engine("no_such_module:Engine", {})
    with pytest.raises(ValueError, match="has no engine"):
        load_engine("compression.compressor:Nope", {})


def test_an_unknown_option_names_the_key_and_the_allowed_ones() -> None:
    with pytest.raises(
        ValueError,
        match="unknown compressor option 'treshold'; allowed: threshold, min_threshold_tokens",
    ):
        load_engine("compressor", {"treshold": 0.5})
    with pytest.raises(ValueError, match="takes no options"):
        load_engine("passthrough", {"threshold": 0.5})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 1.5}, "'threshold' must be in"),
        ({"threshold": "half"}, "'threshold' must be a number"),
        ({"protect_first_n": -1}, "'protect_first_n' must be an integer >= 0"),
        ({"min_threshold_tokens": True}, "must be an integer"),
        ({"tail_mode": "fat"}, "'tail_mode' must be one of"),
        ({"abort_on_summary_failure": "yes"}, "must be true or false"),
        ({"cooldowns": {"timeout": []}}, "needs at least one duration"),
        ({"cooldowns": {"sleepy": 5}}, "unknown failure class 'sleepy'"),
        ({"summary_model": 3}, "'summary_model' must be a model name"),
    ],
)
def test_bad_option_values_fail_at_load_time(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_engine("compressor", options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threshold": 1.5}, "opts.threshold: must be in (0, 1], got 1.5"),
        ({"treshold": 1}, "opts.treshold: unknown option; allowed: threshold, "),
        ({"max_user_messages_carried": 3}, "opts.max_user_messages_carried: was replaced by"),
        ({"cooldowns": {"sleepy": 5}}, "opts.cooldowns.sleepy: unknown failure class; allowed"),
        ({"cooldowns": {"timeout": []}}, "opts.cooldowns.timeout: needs at least one duration"),
    ],
)
def test_a_caller_names_the_option_its_own_way(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        CompressorOptions.from_mapping(options, key=lambda name: f"opts.{name}")
    assert str(raised.value).startswith(message)


def test_option_values_are_normalised() -> None:
    options = CompressorOptions.from_mapping(
        {"threshold": 1, "cooldowns": {"timeout": 5}, "threshold_tokens": None}
    )
    assert options.threshold == 1.0
    assert options.cooldowns["timeout"] == (5.0,)
    assert options.cooldowns["other"] == (60.0,)


def test_engine_limits_fall_back_to_defaults_for_foreign_engines() -> None:
    limits = engine_limits(CustomEngine(), 128_000, None)  # type: ignore[arg-type]
    assert limits.threshold == 64_000
    tuned = engine_limits(load_engine("compressor", {"threshold": 0.7}), 200_000, None)
    assert tuned.threshold == 140_000


async def test_passthrough_never_changes_anything() -> None:
    messages = agent_session(rounds=6)
    out = await PassthroughEngine().compress(messages, context(force=True))
    assert out.outcome == "skipped" and out.messages == messages


def test_the_compressor_imports_no_web_http_or_database_library() -> None:
    banned = {
        "fastapi",
        "starlette",
        "httpx",
        "sqlalchemy",
        "aiosqlite",
        "uvicorn",
        "proxy",
        "storage",
        "asyncpg",
    }
    package = Path(__file__).resolve().parents[2] / "compression"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"
