"""The configuration file, read into `Settings` once at start-up.

`load_settings(path, environ)` is the only place that reads the environment. It parses the
YAML file (or, without one, builds the zero-config document from the environment:
session/config/environment.py), interpolates `${VAR}` / `${VAR:-default}` from `environ`,
validates every key and returns the frozen dataclasses of session/config/settings.py. The whole
document is checked before anything is refused: `SettingsError` carries every problem, each
naming its key, and `ctxgate config check` reports the same list through `check_document`.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from compression import CompressorOptions
from session.config.environment import zero_config_document
from session.config.prices import DEFAULT_PRICES, Price, read_prices
from session.config.reader import Problems, Reader, close_match, did_you_mean, interpolate
from session.config.reader import SettingsError as SettingsError  # raised by load_settings
from session.config.settings import (
    APIS,
    COMPRESSION_KEYS,
    OPTION_HOMES,
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
        max_messages=r.get("max_messages", int, d.max_messages),
        held_request_bytes=r.positive("held_request_bytes", int, d.held_request_bytes),
        body_timeout_s=r.positive("body_timeout_s", float, d.body_timeout_s),
        parsed_request_bytes=r.get("parsed_request_bytes", int, d.parsed_request_bytes),
        upstream_client=r.get("upstream_client", str, d.upstream_client),
        pool_processes=_pool_processes(r),
        pool_timeout_s=r.positive("pool_timeout_s", float, d.pool_timeout_s),
        workers=_workers(r, d.workers),
    )
    if out.max_messages < 0:
        r.fail("max_messages", "must be 0 (no cap) or more")
    if out.parsed_request_bytes < 0:
        r.fail("parsed_request_bytes", "must be 0 or more")
    if out.upstream_client not in ("aiohttp", "httpx"):
        r.fail("upstream_client", f"must be aiohttp or httpx, got {out.upstream_client!r}")
    r.done()
    return out


def _workers(r: Reader, default: int) -> int:
    value = r.get("workers", (int, str), default)
    count = _count(value)
    if count is None:
        r.fail("workers", f"must be a positive integer or auto, got {value!r}")
    return count or default


def _pool_processes(r: Reader) -> int | None:
    value = r.get("pool_processes", (int, str), "auto")
    if value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    r.fail("pool_processes", f"must be auto or an integer >= 0, got {value!r}")
    return None


def worker_count(value: int | str, key: str = "server.workers") -> int:
    """A worker count from the config or the command line: a positive integer or `auto`."""
    count = _count(value)
    if count is None:
        raise SettingsError(f"{key}: must be a positive integer or auto, got {value!r}")
    return count


def _count(value: int | str) -> int | None:
    if value == "auto":
        return _usable_cores()
    try:
        count = int(value)
    except ValueError:
        return None
    return count if count >= 1 else None


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
        r.fail("url", "use sqlite+aiosqlite:// or postgresql+asyncpg://")
    out = StorageSettings(
        url=url,
        in_place=r.get("in_place", bool, d.in_place),
        lease_ttl_s=r.positive("lease_ttl_s", float, d.lease_ttl_s),
        lock_wait_s=r.positive("lock_wait_s", float, d.lock_wait_s),
        session_cache_s=r.get("session_cache_s", float, d.session_cache_s),
        retention=_retention(r.child("retention")),
    )
    if out.session_cache_s < 0:
        r.fail("session_cache_s", "must be 0 or more")
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
        r.fail("session_idle_days", "must be 0 (keep) or more")
    r.done()
    return out


# The provider's own key header, for an upstream that serves only its API.
_DEFAULT_AUTH: dict[tuple[str, ...], str] = {
    ("messages",): "x-api-key",
    ("gemini",): "x-goog-api-key",
}


def _upstream(name: str, r: Reader) -> UpstreamSettings:
    base_url: str = r.get("base_url", str, None) or ""
    if not base_url:
        r.fail("base_url", "required")
    elif not base_url.startswith(("http://", "https://")):
        r.fail("base_url", "must start with http:// or https://")
    headers = r.get("headers", dict, {})
    apis = _apis(r)
    auth = r.get("auth", str, _DEFAULT_AUTH.get(apis, "bearer"))
    if auth not in ("bearer", "x-api-key", "x-goog-api-key"):
        r.fail("auth", f"must be bearer, x-api-key or x-goog-api-key, got {auth!r}")
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
        hint = "".join(did_you_mean(str(api), APIS) for api in unknown)
        r.fail("apis", f"expected a non-empty list of {', '.join(APIS)}, got {raw!r}{hint}")
        return ("chat", "responses")
    return tuple(dict.fromkeys(raw))


def _models(root: Reader, upstreams: Mapping[str, UpstreamSettings]) -> tuple[ModelRule, ...]:
    root.used.add("models")
    raw = root.data.get("models")
    if not isinstance(raw, list) or not raw:
        root.fail("models", "expected a non-empty list of rules")
        return ()
    rules = []
    for i, item in enumerate(raw):
        r = root.item(item, f"models[{i}]")
        upstream = r.get("upstream", str, next(iter(upstreams), ""))
        if upstreams and upstream not in upstreams:
            r.fail("upstream", f"unknown upstream {upstream!r}" + did_you_mean(upstream, upstreams))
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
    if summary.upstream != "auto" and upstreams and summary.upstream not in upstreams:
        hint = did_you_mean(summary.upstream, upstreams)
        s.fail("upstream", f"unknown upstream {summary.upstream!r}{hint}")
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
    built-in engine's `options` table, checked by `CompressorOptions` itself, one at a time so
    that every bad option is reported (an option's check does not depend on the others)."""
    names = [item.name for item in fields(CompressorOptions)]
    for key in options:
        if key in OPTION_HOMES:
            where = f"compression.options.{key}"
            r.fail(
                None, f"this setting lives at {OPTION_HOMES[key]}; set it there instead", path=where
            )
    given = {k: v for k, v in options.items() if k not in OPTION_HOMES} | _compression_keys(r)
    good: dict[str, Any] = {}
    for name, value in given.items():
        near = close_match(str(name), names)
        if name not in names and near is not None:
            r.fail(None, f"unknown option; did you mean {near}?", path=_key_of(str(name)))
            continue
        try:
            CompressorOptions.from_mapping({name: value}, key=_key_of)
        except ValueError as exc:
            where, _, problem = str(exc).partition(": ")  # `KEY: problem`, KEY as _key_of says
            r.fail(None, problem, path=where)
            continue
        good[name] = value
    return CompressorOptions.from_mapping(good, key=_key_of)


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
        r.fail("sample_rate", "must be in [0, 1]")
    r.done()
    return out


def _auth(r: Reader) -> AuthSettings:
    keys = r.get("keys", list, [])
    if not all(isinstance(k, str) and k for k in keys):
        r.fail("keys", "expected a list of non-empty strings")
        keys = []
    out = AuthSettings(keys=tuple(keys), admin_key=r.get("admin_key", str, None))
    r.done()
    return out


def _logging(r: Reader) -> LoggingSettings:
    d = LoggingSettings()
    level: str = r.get("level", str, d.level).lower()
    if level not in ("debug", "info", "warning", "error"):
        r.fail("level", f"expected debug, info, warning or error, got {level!r}")
        level = d.level
    out = LoggingSettings(
        level=level,
        json=r.get("json", bool, d.json),
        log_content=r.get("log_content", bool, d.log_content),
    )
    r.done()
    return out


def parse_settings(document: Any, environ: Mapping[str, str]) -> Settings:
    """Validate an already-loaded YAML document into `Settings`; every problem it has is in
    the `SettingsError` raised."""
    settings, problems = _read(document, environ)
    problems.raise_any()
    return settings


def check_document(document: Any, environ: Mapping[str, str]) -> Problems:
    """Every problem of a document, found by the same reading `parse_settings` does (and the
    `${VAR}`s it names that are unset, in `unset`)."""
    return _read(document, environ)[1]


def _read(document: Any, environ: Mapping[str, str]) -> tuple[Settings, Problems]:
    unset: dict[str, list[str]] = {}
    interpolated = interpolate(document, environ, unset)
    problems = Problems(unset)
    root = Reader(interpolated, "", problems)
    upstreams = _upstreams(root)
    settings = Settings(
        upstreams=upstreams,
        models=_models(root, upstreams),
        server=_server(root.child("server")),
        storage=_storage(root.child("storage")),
        compression=_compression(root.child("compression"), upstreams),
        auth=_auth(root.child("auth")),
        logging=_logging(root.child("logging")),
        tokens=_tokens(root.child("tokens")),
        prices=_prices(root),
    )
    root.done()
    return settings, problems


def _upstreams(root: Reader) -> dict[str, UpstreamSettings]:
    ups = root.child("upstreams")
    if not ups.data:
        # A misspelled `upstreams:` is reported as the unknown key it is (with the name it
        # misspells) rather than as a missing section.
        misspelled = [k for k in root.data if close_match(str(k), ["upstreams"]) == "upstreams"]
        if not [k for k in misspelled if k != "upstreams"]:
            root.fail("upstreams", "at least one upstream is required")
        return {}
    return {str(name): _upstream(str(name), ups.child(str(name))) for name in ups.data}


def _prices(root: Reader) -> tuple[Price, ...]:
    try:
        return read_prices(root)
    except SettingsError as exc:
        if root.problems is None:
            raise
        root.problems.extend(exc)
        return DEFAULT_PRICES


def _tokens(r: Reader) -> TokenSettings:
    out = TokenSettings(encodings_dir=r.get("encodings_dir", str, None))
    r.done()
    return out


def load_document(path: str | Path | None, environ: Mapping[str, str]) -> Any:
    """The YAML document at `path` or, when None, the zero-config one built from `environ`."""
    if path is None:
        return zero_config_document(environ)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: invalid YAML: {exc}") from exc


def load_settings(path: str | Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read `path` (YAML) or, when None, build the zero-config default from the environment."""
    env = os.environ if environ is None else environ
    return parse_settings(load_document(path, env), env)
