"""The configuration file, read into `Settings` once at start-up.

`load_settings(path, environ)` is the only place that reads the environment. It parses the
YAML file, interpolates `${VAR}` / `${VAR:-default}` from `environ`, validates every key and
returns the frozen dataclasses of session/config/settings.py. Any problem raises
`SettingsError` naming the key.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from compression import CompressorOptions
from session.config.prices import read_prices
from session.config.reader import Reader, interpolate
from session.config.reader import SettingsError as SettingsError  # raised by load_settings
from session.config.settings import (
    APIS,
    COMPRESSION_KEYS,
    AuthSettings,
    CompressionSettings,
    LoggingSettings,
    ModelRule,
    RecallSettings,
    RetentionSettings,
    ServerSettings,
    Settings,
    ShadowSettings,
    StorageSettings,
    SummarySettings,
    TokenSettings,
    UpstreamSettings,
)


def _server(r: Reader) -> ServerSettings:
    d = ServerSettings()
    out = ServerSettings(
        host=r.get("host", str, d.host),
        port=r.positive("port", int, d.port),
        max_body_bytes=r.positive("max_body_bytes", int, d.max_body_bytes),
        held_request_bytes=r.positive("held_request_bytes", int, d.held_request_bytes),
        body_timeout_s=r.positive("body_timeout_s", float, d.body_timeout_s),
        parsed_request_bytes=r.get("parsed_request_bytes", int, d.parsed_request_bytes),
        upstream_client=r.get("upstream_client", str, d.upstream_client),
        workers=worker_count(r.get("workers", (int, str), d.workers), r._key("workers")),
    )
    if out.parsed_request_bytes < 0:
        raise SettingsError(f"{r._key('parsed_request_bytes')}: must be 0 or more")
    if out.upstream_client not in ("aiohttp", "httpx"):
        raise SettingsError(
            f"{r._key('upstream_client')}: must be aiohttp or httpx, got {out.upstream_client!r}"
        )
    r.done()
    return out


def worker_count(value: int | str, key: str = "server.workers") -> int:
    """A worker count from the config or the command line: a positive integer or `auto`."""
    if value == "auto":
        return _usable_cores()
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise SettingsError(f"{key}: must be a positive integer or auto, got {value!r}")
    return count


def _usable_cores() -> int:
    """The cores this process may run on (its affinity mask, narrower than the machine's)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def _storage(r: Reader) -> StorageSettings:
    d = StorageSettings()
    url: str = r.get("url", str, d.url)
    if not url.startswith(("sqlite+aiosqlite:", "postgresql+asyncpg:")):
        raise SettingsError(f"{r._key('url')}: use sqlite+aiosqlite:// or postgresql+asyncpg://")
    out = StorageSettings(
        url=url,
        in_place=r.get("in_place", bool, d.in_place),
        lease_ttl_s=r.positive("lease_ttl_s", float, d.lease_ttl_s),
        lock_wait_s=r.positive("lock_wait_s", float, d.lock_wait_s),
        session_cache_s=r.get("session_cache_s", float, d.session_cache_s),
        retention=_retention(r.child("retention")),
    )
    if out.session_cache_s < 0:
        raise SettingsError(f"{r._key('session_cache_s')}: must be 0 or more")
    r.done()
    return out


def _retention(r: Reader) -> RetentionSettings:
    d = RetentionSettings()
    out = RetentionSettings(
        session_idle_days=r.get("session_idle_days", float, d.session_idle_days),
        keep_daily_usage=r.get("keep_daily_usage", bool, d.keep_daily_usage),
        interval_s=r.positive("interval_s", float, d.interval_s),
    )
    if out.session_idle_days < 0:
        raise SettingsError(f"{r._key('session_idle_days')}: must be 0 (keep) or more")
    r.done()
    return out


# The provider's own key header, for an upstream that serves only its API.
_DEFAULT_AUTH: dict[tuple[str, ...], str] = {
    ("messages",): "x-api-key",
    ("gemini",): "x-goog-api-key",
}


def _upstream(name: str, r: Reader) -> UpstreamSettings:
    base_url: str | None = r.get("base_url", str, None)
    if not base_url:
        raise SettingsError(f"{r._key('base_url')}: required")
    if not base_url.startswith(("http://", "https://")):
        raise SettingsError(f"{r._key('base_url')}: must start with http:// or https://")
    headers = r.get("headers", dict, {})
    apis = _apis(r)
    auth = r.get("auth", str, _DEFAULT_AUTH.get(apis, "bearer"))
    if auth not in ("bearer", "x-api-key", "x-goog-api-key"):
        raise SettingsError(
            f"{r._key('auth')}: must be bearer, x-api-key or x-goog-api-key, got {auth!r}"
        )
    out = UpstreamSettings(
        name=name,
        base_url=base_url.rstrip("/"),
        api_key=r.get("api_key", str, None),
        timeout_s=r.positive("timeout_s", float, 600.0),
        connect_timeout_s=r.positive("connect_timeout_s", float, 10.0),
        headers={str(k): str(v) for k, v in headers.items()},
        apis=apis,
        auth=auth,
    )
    r.done()
    return out


def _apis(r: Reader) -> tuple[str, ...]:
    raw = r.get("apis", list, ["chat", "responses"])
    unknown = [api for api in raw if api not in APIS]
    if unknown or not raw:
        raise SettingsError(
            f"{r._key('apis')}: expected a non-empty list of {', '.join(APIS)}, got {raw!r}"
        )
    return tuple(dict.fromkeys(raw))


def _models(raw: Any, upstreams: Mapping[str, UpstreamSettings]) -> tuple[ModelRule, ...]:
    if not isinstance(raw, list) or not raw:
        raise SettingsError("models: expected a non-empty list of rules")
    rules = []
    for i, item in enumerate(raw):
        r = Reader(item, f"models[{i}]")
        upstream = r.get("upstream", str, next(iter(upstreams)))
        if upstream not in upstreams:
            raise SettingsError(f"models[{i}].upstream: unknown upstream {upstream!r}")
        rules.append(
            ModelRule(
                match=r.get("match", str, "*"),
                upstream=upstream,
                context_length=r.positive("context_length", int, 128_000),
                max_output_tokens=r.positive("max_output_tokens", int, None),
                encoding=r.get("encoding", str, None),
            )
        )
        r.done()
    return tuple(rules)


def _compression(r: Reader, upstreams: Mapping[str, UpstreamSettings]) -> CompressionSettings:
    d = CompressionSettings()
    s, ds = r.child("summary"), d.summary
    summary = SummarySettings(
        model=s.get("model", str, ds.model),
        upstream=s.get("upstream", str, ds.upstream),
        timeout_s=s.positive("timeout_s", float, ds.timeout_s),
        context_length=s.positive("context_length", int, ds.context_length),
    )
    s.done()
    c, dc = r.child("recall"), d.recall
    recall = RecallSettings(
        enabled=c.get("enabled", bool, dc.enabled),
        max_rounds=c.positive("max_rounds", int, dc.max_rounds),
        max_tokens=c.positive("max_tokens", int, dc.max_tokens),
        ahead=c.get("ahead", bool, dc.ahead),
        ahead_share=c.positive("ahead_share", float, dc.ahead_share),
    )
    if recall.ahead_share > 0.5:
        raise SettingsError("compression.recall.ahead_share: at most 0.5 of the window")
    c.done()
    shadow = _shadow(r.child("shadow"))
    if summary.upstream != "auto" and summary.upstream not in upstreams:
        raise SettingsError(f"compression.summary.upstream: unknown upstream {summary.upstream!r}")
    engine: str = r.get("engine", str, d.engine)
    raw_options = dict(r.get("options", dict, {}))
    out = CompressionSettings(
        engine=engine,
        compressor=_compressor(r, raw_options if engine == "compressor" else {}),
        max_attempts=r.positive("max_attempts", int, d.max_attempts),
        background=r.get("background", bool, d.background),
        background_wait_s=r.positive("background_wait_s", float, d.background_wait_s),
        summary=summary,
        recall=recall,
        shadow=shadow,
        options=raw_options,
    )
    r.done()
    return out


def _compressor(r: Reader, options: Mapping[str, Any]) -> CompressorOptions:
    """The built-in compressor's options from the `compression` keys that set them and the
    built-in engine's `options` table, checked once, by `CompressorOptions` itself."""
    for key in options:
        if key in _HOMES:
            raise SettingsError(
                f"compression.options.{key}: this setting lives at {_HOMES[key]}; "
                "set it there instead"
            )
    try:
        return CompressorOptions.from_mapping({**options, **_compression_keys(r)}, key=_key_of)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _compression_keys(r: Reader) -> dict[str, Any]:
    """The options set on `compression` itself, as written (read as their option's type, so a
    `${VAR}` string becomes a number); an absent one keeps the option's default."""
    kinds = typing.get_type_hints(CompressorOptions)
    values = {name: r.get(name, kinds[name], None) for name in COMPRESSION_KEYS}
    return {name: value for name, value in values.items() if value is not None}


def _key_of(option: str) -> str:
    """An option's config key, for error messages."""
    home = "compression" if option in COMPRESSION_KEYS else "compression.options"
    return f"{home}.{option}"


def _shadow(r: Reader) -> ShadowSettings:
    d = ShadowSettings()
    out = ShadowSettings(
        enabled=r.get("enabled", bool, d.enabled),
        sample_rate=r.get("sample_rate", float, d.sample_rate),
        daily_tokens=r.positive("daily_tokens", int, d.daily_tokens),
        max_tokens=r.positive("max_tokens", int, d.max_tokens),
    )
    if not 0 <= out.sample_rate <= 1:
        raise SettingsError(f"{r._key('sample_rate')}: must be in [0, 1]")
    r.done()
    return out


# Built-in engine options that have their home elsewhere in the config.
_HOMES = {
    **{name: f"compression.{name}" for name in COMPRESSION_KEYS},
    "summary_model": "compression.summary.model",
    "summary_timeout": "compression.summary.timeout_s",
    "summary_model_context_length": "compression.summary.context_length",
}


def _auth(r: Reader) -> AuthSettings:
    keys = r.get("keys", list, [])
    if not all(isinstance(k, str) and k for k in keys):
        raise SettingsError("auth.keys: expected a list of non-empty strings")
    out = AuthSettings(keys=tuple(keys), admin_key=r.get("admin_key", str, None))
    r.done()
    return out


def _logging(r: Reader) -> LoggingSettings:
    d = LoggingSettings()
    level: str = r.get("level", str, d.level).lower()
    if level not in ("debug", "info", "warning", "error"):
        raise SettingsError(f"logging.level: expected debug, info, warning or error, got {level!r}")
    out = LoggingSettings(
        level=level,
        json=r.get("json", bool, d.json),
        log_content=r.get("log_content", bool, d.log_content),
    )
    r.done()
    return out


def _default_document(environ: Mapping[str, str]) -> dict[str, Any]:
    return {
        "upstreams": {
            "default": {
                "base_url": environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1",
                "api_key": environ.get("OPENAI_API_KEY") or None,
            }
        },
        "models": [{"match": "*", "upstream": "default", "context_length": 128_000}],
    }


def parse_settings(document: Any, environ: Mapping[str, str]) -> Settings:
    """Validate an already-loaded YAML document into `Settings`."""
    root = Reader(interpolate(document, environ), "")
    ups = root.child("upstreams")
    if not ups.data:
        raise SettingsError("upstreams: at least one upstream is required")
    upstreams = {name: _upstream(name, ups.child(name)) for name in ups.data}
    root.used.add("models")
    settings = Settings(
        upstreams=upstreams,
        models=_models(root.data.get("models"), upstreams),
        server=_server(root.child("server")),
        storage=_storage(root.child("storage")),
        compression=_compression(root.child("compression"), upstreams),
        auth=_auth(root.child("auth")),
        logging=_logging(root.child("logging")),
        tokens=_tokens(root.child("tokens")),
        prices=read_prices(root),
    )
    root.done()
    return settings


def _tokens(r: Reader) -> TokenSettings:
    out = TokenSettings(encodings_dir=r.get("encodings_dir", str, None))
    r.done()
    return out


def load_settings(path: str | Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `path` (YAML) or, when None, build the zero-config default from the environment."""
    env = os.environ if environ is None else environ
    if path is None:
        return parse_settings(_default_document(env), env)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: invalid YAML: {exc}") from exc
    return parse_settings(document, env)
