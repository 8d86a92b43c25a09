"""Config: one YAML file validated once, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from compression import Compressor, CompressorOptions
from proxy.config_file import SettingsError, load_settings, parse_settings
from proxy.edge.services import build_engine

BASE = {
    "upstreams": {"openai": {"base_url": "https://api.example.com/v1/", "api_key": "${KEY}"}},
    "models": [{"match": "gpt-4o*", "upstream": "openai", "context_length": 128000}],
}


def test_example_config_loads() -> None:
    example = Path(__file__).parents[2] / "config.example.yaml"
    settings = load_settings(example, {"OPENAI_API_KEY": "sk-1"})
    assert settings.upstreams["openai"].api_key == "sk-1"
    assert settings.compression.compressor.threshold == 0.5
    assert settings.rule_for("gpt-4o-mini") is settings.models[0]
    assert settings.rule_for("anything") is settings.models[-1]


def test_interpolation_and_defaults() -> None:
    doc = {**BASE, "server": {"port": "${PORT:-9000}"}}
    settings = parse_settings(doc, {"KEY": "secret"})
    assert settings.upstreams["openai"].api_key == "secret"
    assert settings.upstreams["openai"].base_url == "https://api.example.com/v1"
    assert settings.server.port == 9000
    assert settings.storage.url.startswith("sqlite+aiosqlite://")


def test_missing_variable_means_no_key() -> None:
    settings = parse_settings(BASE, {})
    assert settings.upstreams["openai"].api_key is None


def test_no_config_file_uses_the_environment() -> None:
    settings = load_settings(None, {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert settings.upstreams["openai"].base_url == "http://127.0.0.1:9/v1"
    assert settings.rule_for("any-model") is not None


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"server": {"port": "eighty"}}, "server.port: expected an integer"),
        ({"server": {"prot": 1}}, "server.prot: unknown key"),
        ({"server": {"upstream_client": "curl"}}, "server.upstream_client: must be aiohttp or"),
        ({"server": {"parsed_request_bytes": -1}}, "server.parsed_request_bytes: must be 0 or"),
        ({"compression": {"threshold": 1.5}}, "compression.threshold: must be in (0, 1]"),
        ({"compression": {"threshold": "half"}}, "compression.threshold: expected a number"),
        (
            {"compression": {"hygiene_max_messages": 0}},
            "compression.hygiene_max_messages: must be an integer >= 1, got 0",
        ),
        (
            {"compression": {"options": {"protect_first_n": -1}}},
            "compression.options.protect_first_n: must be an integer >= 0, got -1",
        ),
        (
            {"compression": {"options": {"treshold": 0.6}}},
            "compression.options.treshold: unknown option; did you mean threshold?",
        ),
        (
            {"compression": {"options": {"cooldowns": {"timeout": [-1]}}}},
            "compression.options.cooldowns.timeout: must be >= 0, got -1",
        ),
        ({"compression": {"summary": {"upstream": "nope"}}}, "compression.summary.upstream"),
        ({"models": [{"match": "*", "upstream": "missing"}]}, "models[0].upstream: unknown"),
        ({"models": []}, "models: expected a non-empty list"),
        ({"storage": {"url": "mysql://x"}}, "storage.url"),
        ({"upstreams": {"a": {"base_url": "ftp://x"}}}, "upstreams.a.base_url"),
        ({"auth": {"keys": "one"}}, "auth.keys: expected a list"),
        ({"logging": {"level": "loud"}}, "logging.level"),
        (
            {"compression": {"options": {"threshold": 0.6}}},
            "compression.options.threshold: this setting lives at compression.threshold",
        ),
        (
            {"compression": {"options": {"summary_model": "m"}}},
            "compression.options.summary_model: this setting lives at compression.summary.model",
        ),
        (
            {"compression": {"options": {"summary_timeout": 5}}},
            "lives at compression.summary.timeout_s",
        ),
        (
            {"compression": {"options": {"summary_model_context_length": 8000}}},
            "lives at compression.summary.context_length",
        ),
        (
            {"upstreams": {"a": {"base_url": "http://x", "apis": ["chat", "soap"]}}},
            "upstreams.a.apis: expected a non-empty list of chat, responses, messages",
        ),
        ({"upstreams": {"a": {"base_url": "http://x", "auth": "basic"}}}, "upstreams.a.auth"),
    ],
)
def test_errors_name_the_key(patch: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_settings({**BASE, **patch}, {})


def test_unreadable_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings(tmp_path / "absent.yaml", {})
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: [unclosed\n")
    with pytest.raises(SettingsError, match="invalid YAML"):
        load_settings(bad, {})


def test_an_upstream_declares_its_apis_and_how_its_key_travels() -> None:
    ups = {
        "both": {"base_url": "http://a/v1"},
        "claude": {"base_url": "http://b/v1", "apis": ["messages"]},
        "mixed": {"base_url": "http://c/v1", "apis": ["chat", "messages"], "auth": "x-api-key"},
    }
    settings = parse_settings({**BASE, "upstreams": ups, "models": [{"match": "*"}]}, {})
    assert settings.upstreams["both"].apis == ("chat", "responses")
    assert settings.upstreams["both"].auth == "bearer"
    assert settings.upstreams["claude"].auth == "x-api-key"
    assert settings.upstreams["mixed"].apis == ("chat", "messages")


def test_the_compressor_options_arrive_checked_as_one_value() -> None:
    compression = {
        "threshold": "${THRESHOLD}",
        "hygiene_max_messages": 900,
        "options": {"protect_last_n": 4},
    }
    settings = parse_settings({**BASE, "compression": compression}, {"THRESHOLD": "0.6"})
    options = settings.compression.compressor
    assert options == CompressorOptions(threshold=0.6, hygiene_max_messages=900, protect_last_n=4)
    engine = build_engine(settings)
    assert isinstance(engine, Compressor) and engine.options is options


def test_unset_keys_keep_the_options_own_defaults() -> None:
    assert parse_settings(BASE, {}).compression.compressor == CompressorOptions()


def test_an_engine_named_by_import_string_gets_its_options_as_written() -> None:
    compression = {
        "engine": "tests.compression.test_registry:CustomEngine",
        "threshold": 0.7,
        "options": {"level": 3},
    }
    settings = parse_settings({**BASE, "compression": compression}, {})
    assert settings.compression.options == {"level": 3}
    assert settings.compression.compressor == CompressorOptions(threshold=0.7)
    assert getattr(build_engine(settings), "level", None) == 3
