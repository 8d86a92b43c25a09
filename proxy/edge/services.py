"""The parts one app runs on, built in its lifespan: the store, the connection pool, the gateway.

`Services` lives here, apart from the ASGI app, so that every edge module can name it without
importing the app that mounts them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from compression import ContextEngine, TokenCounter, counter_for_model
from proxy.doors.registry import summary_door
from proxy.gateway.auth import Authenticator
from proxy.gateway.gateway import Gateway
from proxy.provider.transport import new_http_transport
from proxy.provider.upstream import Upstream
from session.compaction import Compactor
from session.config.settings import Settings
from session.conversations import Conversations
from session.ledger.book import Ledger
from session.ledger.shadow import Shadow
from session.memory import Sessions
from session.metrics import Metrics
from session.models import Models
from session.pool import EnginePool, pool_size
from session.pressure import measure
from session.recall.tool import Recaller
from storage import (
    RetentionPolicy,
    SessionLocks,
    SessionStore,
    Sweeper,
    journal_directory,
    read_terms_with,
)


def build_engine(settings: Settings) -> ContextEngine:
    """The configured engine; raises ValueError naming the problem (checked at start-up). The
    built-in one takes the options the config reader checked; one named by import string, the
    `options` table as written."""
    from compression import load_engine

    c = settings.compression
    return load_engine(c.engine, c.compressor if c.engine == "compressor" else c.options)


@dataclass(slots=True)
class Services:
    settings: Settings
    http: httpx.AsyncBaseTransport
    store: SessionStore
    gateway: Gateway
    conversations: Conversations
    models: Models
    sessions: Sessions
    upstreams: dict[str, Upstream]
    auth: Authenticator
    metrics: Metrics
    owns_http: bool
    owns_store: bool
    sweeper: Sweeper | None = None  # the retention sweep's task, when retention is on
    pool: EnginePool | None = None  # compression passes off the loop, when the server has one

    async def close(self) -> None:
        if self.sweeper is not None:
            await self.sweeper.close()
        if self.gateway.charges.shadow is not None:
            await self.gateway.charges.shadow.close()  # checks still running: cancelled
        await self.conversations.close()
        if self.owns_store:
            await self.store.close()  # writes out the usage still queued in memory
        else:
            await self.store.flush()  # its owner closes it; what this app queued is written
        if self.owns_http:
            await self.http.aclose()
        if self.pool is not None:
            read_terms_with(None)
            self.pool.close()


async def start_services(
    settings: Settings,
    *,
    http_transport: httpx.AsyncBaseTransport | None = None,
    store: SessionStore | None = None,
    engine: ContextEngine | None = None,
    clock: Callable[[], float] = time.time,
) -> Services:
    engine = engine or build_engine(settings)
    http = http_transport or new_http_transport(settings.server.upstream_client)
    owns_store = store is None
    if store is None:
        url = settings.storage.url
        store = await SessionStore.open(
            url,
            session_cache_s=settings.storage.session_cache_s,
            journal_dir=journal_directory(url),  # a crash loses no accounting
        )
    upstreams = {name: Upstream(up, http) for name, up in settings.upstreams.items()}
    locks = SessionLocks(store, ttl_s=settings.storage.lease_ttl_s)
    await locks.release_dead_holders()  # a restart takes its crashed predecessor's leases back
    metrics = Metrics()
    pool = start_pool(settings, await asyncio.to_thread(_counters, settings))
    compactor = Compactor(
        store=store,
        locks=locks,
        engine=engine,
        lock_wait_s=settings.storage.lock_wait_s,
        in_place=settings.storage.in_place,
        handles=settings.compression.recall.enabled,
        clock=clock,
        observe=metrics.compression,
        pool=pool,
    )
    models = Models(settings, store, engine, await store.get_model_windows())
    sessions = Sessions(store, clock, settings.server.held_request_bytes)
    ledger = Ledger(settings, store, metrics.charged, clock)
    conversations = Conversations(
        settings, store, compactor, upstreams, models, sessions, clock, summary_door, ledger
    )
    auth = Authenticator(settings.auth)
    recaller = Recaller(
        store,
        settings.compression.recall,
        lambda turn: models.counter(turn.rule, turn.request.model),
        lambda turn: (
            measure(
                turn,
                models.counter(turn.rule, turn.request.model),
                models.calibration(turn.request.model),
            ).tokens
        ),
        metrics,
    )
    shadow = Shadow(settings.compression.shadow, store, ledger, metrics.shadowed, clock=clock)
    gateway = Gateway(settings, conversations, auth, metrics, recaller, upstreams, ledger, shadow)
    sweeper = retention_sweeper(settings, store, locks.owner)
    return Services(
        settings,
        http,
        store,
        gateway,
        conversations,
        models,
        sessions,
        upstreams,
        auth,
        metrics,
        owns_http=http_transport is None,
        owns_store=owns_store,
        sweeper=sweeper,
        pool=pool,
    )


def _counters(settings: Settings) -> list[TokenCounter]:
    """The counters of the configured models (loading an encoding takes a second or more)."""
    directory = settings.tokens.encodings_dir
    names = {rule.encoding for rule in settings.models}
    return [counter_for_model("", encoding=name, encodings_dir=directory) for name in names]


def start_pool(settings: Settings, warm: list[TokenCounter]) -> EnginePool | None:
    """The compression pool of this server process (None when `server.pool_processes` is 0),
    its workers starting with the counters in `warm` built."""
    server = settings.server
    size = pool_size(server.pool_processes, server.workers)
    if size <= 0:
        return None
    pool = EnginePool(size, server.pool_timeout_s, warm)
    pool.start()
    read_terms_with(pool.call)  # the search terms of what a compression archives
    return pool


def retention_sweeper(settings: Settings, store: SessionStore, owner: str) -> Sweeper | None:
    """The periodic retention sweep, started (None when retention is off)."""
    r = settings.storage.retention
    if r.session_idle_days <= 0:
        return None
    policy = RetentionPolicy(r.session_idle_days * 86_400, r.keep_daily_usage, r.interval_s)
    sweeper = Sweeper(store, policy, owner)
    sweeper.start()
    return sweeper
