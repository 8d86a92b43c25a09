"""One typed settings object, read once at start-up.

`load_settings(path, environ)` is the only place that reads the environment. It parses the
YAML file, interpolates `${VAR}` / `${VAR:-default}` from `environ`, validates every key and
returns nested frozen dataclasses. Any problem raises `SettingsError` naming the key.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class SettingsError(ValueError):
    """The configuration is invalid; the message names the offending key."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8400
    max_body_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StorageSettings:
    url: str = "sqlite+aiosqlite:///./ctxgate.db"
    in_place: bool = True
    lease_ttl_s: float = 30.0
    lock_wait_s: float = 10.0


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    name: str
    base_url: str
    api_key: str | None = None  # None: forward the client's Authorization header
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRule:
    match: str
    upstream: str
    context_length: int = 128_000
    max_output_tokens: int | None = None
    encoding: str | None = None

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.match)


@dataclass(frozen=True, slots=True)
class SummarySettings:
    model: str = "auto"  # "auto": the request's model
    upstream: str = "auto"  # "auto": the request's upstream
    timeout_s: float = 120.0
    context_length: int | None = None  # the summary model's window when it differs


@dataclass(frozen=True, slots=True)
class CompressionSettings:
    engine: str = "compressor"
    threshold: float = 0.50
    hygiene_threshold: float = 0.85
    hygiene_max_messages: int = 5000
    max_attempts: int = 3
    background: bool = True
    background_wait_s: float = 30.0
    summary: SummarySettings = field(default_factory=SummarySettings)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    keys: tuple[str, ...] = ()
    admin_key: str | None = None


@dataclass(frozen=True, slots=True)
class LoggingSettings:
    level: str = "info"
    json: bool = True
    log_content: bool = False


@dataclass(frozen=True, slots=True)
class TokenSettings:
    encodings_dir: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    upstreams: Mapping[str, UpstreamSettings]
    models: tuple[ModelRule, ...]
    server: ServerSettings = field(default_factory=ServerSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    compression: CompressionSettings = field(default_factory=CompressionSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    tokens: TokenSettings = field(default_factory=TokenSettings)

    def rule_for(self, model: str) -> ModelRule | None:
        """The first model rule whose glob matches `model`."""
        for rule in self.models:
            if rule.matches(model):
                return rule
        return None


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [_interpolate(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v, environ) for k, v in value.items()}
    return value


class _Reader:
    """Typed access to one YAML mapping, remembering its dotted path for error messages."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SettingsError(f"{path or 'config'}: expected a mapping")
        self.data: dict[str, Any] = data
        self.path = path
        self.used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(key)
        value = self.data.get(key, default)
        if value is None or value == "":
            return default
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if kind in (int, float) and isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                pass
        if kind is bool and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise SettingsError(f"{self._key(key)}: expected {_kind_name(kind)}, got {value!r}")
        return value

    def positive(self, key: str, kind: type, default: Any) -> Any:
        value = self.get(key, kind, default)
        if value is not None and value <= 0:
            raise SettingsError(f"{self._key(key)}: must be greater than 0, got {value!r}")
        return value

    def fraction(self, key: str, default: float) -> float:
        value: float = self.get(key, float, default)
        if not 0 < value <= 1:
            raise SettingsError(f"{self._key(key)}: must be in (0, 1], got {value!r}")
        return value

    def child(self, key: str) -> _Reader:
        self.used.add(key)
        return _Reader(self.data.get(key), self._key(key))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise SettingsError(f"{self._key(unknown[0])}: unknown key")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    names.update({list: "a list", dict: "a mapping"})
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def _server(r: _Reader) -> ServerSettings:
    d = ServerSettings()
    out = ServerSettings(
        host=r.get("host", str, d.host),
        port=r.positive("port", int, d.port),
        max_body_bytes=r.positive("max_body_bytes", int, d.max_body_bytes),
    )
    r.done()
    return out


def _storage(r: _Reader) -> StorageSettings:
    d = StorageSettings()
    url: str = r.get("url", str, d.url)
    if not url.startswith(("sqlite+aiosqlite:", "postgresql+asyncpg:")):
        raise SettingsError(f"{r._key('url')}: use sqlite+aiosqlite:// or postgresql+asyncpg://")
    out = StorageSettings(
        url=url,
        in_place=r.get("in_place", bool, d.in_place),
        lease_ttl_s=r.positive("lease_ttl_s", float, d.lease_ttl_s),
        lock_wait_s=r.positive("lock_wait_s", float, d.lock_wait_s),
    )
    r.done()
    return out


def _upstream(name: str, r: _Reader) -> UpstreamSettings:
    base_url: str | None = r.get("base_url", str, None)
    if not base_url:
        raise SettingsError(f"{r._key('base_url')}: required")
    if not base_url.startswith(("http://", "https://")):
        raise SettingsError(f"{r._key('base_url')}: must start with http:// or https://")
    headers = r.get("headers", dict, {})
    out = UpstreamSettings(
        name=name,
        base_url=base_url.rstrip("/"),
        api_key=r.get("api_key", str, None),
        timeout_s=r.positive("timeout_s", float, 600.0),
        connect_timeout_s=r.positive("connect_timeout_s", float, 10.0),
        headers={str(k): str(v) for k, v in headers.items()},
    )
    r.done()
    return out


def _models(raw: Any, upstreams: Mapping[str, UpstreamSettings]) -> tuple[ModelRule, ...]:
    if not isinstance(raw, list) or not raw:
        raise SettingsError("models: expected a non-empty list of rules")
    rules = []
    for i, item in enumerate(raw):
        r = _Reader(item, f"models[{i}]")
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


def _compression(r: _Reader, upstreams: Mapping[str, UpstreamSettings]) -> CompressionSettings:
    d = CompressionSettings()
    s = r.child("summary")
    summary = SummarySettings(
        model=s.get("model", str, "auto"),
        upstream=s.get("upstream", str, "auto"),
        timeout_s=s.positive("timeout_s", float, 120.0),
        context_length=s.positive("context_length", int, None),
    )
    s.done()
    if summary.upstream != "auto" and summary.upstream not in upstreams:
        raise SettingsError(f"compression.summary.upstream: unknown upstream {summary.upstream!r}")
    out = CompressionSettings(
        engine=r.get("engine", str, d.engine),
        threshold=r.fraction("threshold", d.threshold),
        hygiene_threshold=r.fraction("hygiene_threshold", d.hygiene_threshold),
        hygiene_max_messages=r.positive("hygiene_max_messages", int, d.hygiene_max_messages),
        max_attempts=r.positive("max_attempts", int, d.max_attempts),
        background=r.get("background", bool, d.background),
        background_wait_s=r.positive("background_wait_s", float, d.background_wait_s),
        summary=summary,
        options=dict(r.get("options", dict, {})),
    )
    r.done()
    return out


def _auth(r: _Reader) -> AuthSettings:
    keys = r.get("keys", list, [])
    if not all(isinstance(k, str) and k for k in keys):
        raise SettingsError("auth.keys: expected a list of non-empty strings")
    out = AuthSettings(keys=tuple(keys), admin_key=r.get("admin_key", str, None))
    r.done()
    return out


def _logging(r: _Reader) -> LoggingSettings:
    level: str = r.get("level", str, "info").lower()
    if level not in ("debug", "info", "warning", "error"):
        raise SettingsError(f"logging.level: expected debug, info, warning or error, got {level!r}")
    out = LoggingSettings(
        level=level, json=r.get("json", bool, True), log_content=r.get("log_content", bool, False)
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
    root = _Reader(_interpolate(document, environ), "")
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
    )
    root.done()
    return settings


def _tokens(r: _Reader) -> TokenSettings:
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
