"""Building the ASGI app: services created in the lifespan, routes, one error mapping."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from compression.engine import ContextEngine
from compression.options import CompressorOptions
from proxy.admin import router as admin_router
from proxy.auth import Authenticator
from proxy.compaction import Compactor
from proxy.conversations import Conversations
from proxy.errors import BadRequest, ProxyError, error_response
from proxy.gateway import Gateway
from proxy.metrics import Metrics
from proxy.relay import router as relay_router
from proxy.routes import CHAT_PATHS, header_dict, read_body, router
from proxy.settings import Settings
from proxy.upstream import Upstream, new_http_transport
from storage import SessionLocks, SessionStore, wait_budget

log = logging.getLogger("ctxgate")


def engine_options(settings: Settings) -> dict[str, Any]:
    """The built-in engine's options: the top-level thresholds plus `compression.options`."""
    c = settings.compression
    options: dict[str, Any] = {
        "threshold": c.threshold,
        "hygiene_threshold": c.hygiene_threshold,
        "hygiene_max_messages": c.hygiene_max_messages,
    }
    if c.summary.context_length:
        options["summary_model_context_length"] = c.summary.context_length
    return {**options, **c.options}


def trigger_options(settings: Settings) -> CompressorOptions:
    """Threshold figures the proxy's triggers use, whichever engine is configured."""
    options = engine_options(settings)
    if settings.compression.engine not in ("compressor",):
        keep = {
            "threshold",
            "hygiene_threshold",
            "hygiene_max_messages",
            "min_threshold_tokens",
            "threshold_tokens",
        }
        options = {k: v for k, v in options.items() if k in keep}
    return CompressorOptions.from_mapping(options)


def build_engine(settings: Settings) -> ContextEngine:
    """The configured engine; raises ValueError naming the problem (checked at start-up)."""
    from compression import load_engine

    name = settings.compression.engine
    options = (
        engine_options(settings) if name == "compressor" else dict(settings.compression.options)
    )
    return load_engine(name, options)


@dataclass(slots=True)
class Services:
    settings: Settings
    http: httpx.AsyncBaseTransport
    store: SessionStore
    gateway: Gateway
    conversations: Conversations
    upstreams: dict[str, Upstream]
    auth: Authenticator
    metrics: Metrics
    owns_http: bool
    owns_store: bool

    async def close(self) -> None:
        await self.conversations.close()
        if self.owns_store:
            await self.store.close()  # writes out the usage still queued in memory
        else:
            await self.store.flush()  # its owner closes it; what this app queued is written
        if self.owns_http:
            await self.http.aclose()


async def start_services(
    settings: Settings,
    *,
    http_transport: httpx.AsyncBaseTransport | None = None,
    store: SessionStore | None = None,
    engine: ContextEngine | None = None,
    clock: Callable[[], float] = time.time,
) -> Services:
    engine = engine or build_engine(settings)
    http = http_transport or new_http_transport()
    owns_store = store is None
    if store is None:
        store = await SessionStore.open(
            settings.storage.url, session_cache_s=settings.storage.session_cache_s
        )
    upstreams = {name: Upstream(up, http) for name, up in settings.upstreams.items()}
    locks = SessionLocks(store, ttl_s=settings.storage.lease_ttl_s)
    await locks.release_dead_holders()  # a restart takes its crashed predecessor's leases back
    metrics = Metrics()
    compactor = Compactor(
        store=store,
        locks=locks,
        engine=engine,
        lock_wait_s=settings.storage.lock_wait_s,
        in_place=settings.storage.in_place,
        clock=clock,
        observe=metrics.compression,
    )
    windows = await store.get_model_windows()
    conversations = Conversations(
        settings, store, compactor, upstreams, trigger_options(settings), windows, clock
    )
    auth = Authenticator(settings.auth)
    gateway = Gateway(settings, conversations, auth, metrics)
    return Services(
        settings,
        http,
        store,
        gateway,
        conversations,
        upstreams,
        auth,
        metrics,
        owns_http=http_transport is None,
        owns_store=owns_store,
    )


async def on_proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    services = getattr(request.app.state, "services", None)
    if services is not None:
        services.metrics.error(exc.status_code)
    return error_response(exc)


async def on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg", "invalid request"))
    return error_response(BadRequest(f"Invalid {where or 'request'}: {message}", param=where))


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    error = ProxyError(str(exc.detail))
    error.status_code = exc.status_code
    error.type = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return error_response(error)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s", request.url.path)
    return error_response(ProxyError("ctxgate hit an internal error; see its log."))


class CtxgateApp(FastAPI):
    """FastAPI, except that chat completions skip its router and middleware stack.

    Every request of an agent goes through that one route; FastAPI's dispatch (a dozen
    middleware and routing layers, a Request object, header lookups that decode the raw list
    each time) costs a few hundred microseconds of it. The route stays declared for the
    OpenAPI schema; errors map through the same handlers.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in CHAT_PATHS:
            scope["app"] = self
            await self._chat(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        services: Services = self.state.services
        try:
            headers = header_dict(scope["headers"])
            server = services.settings.server
            raw = await read_body(
                headers, receive, server.max_body_bytes, timeout_s=server.body_timeout_s
            )
            with wait_budget(services.settings.storage.lock_wait_s):
                response = await services.gateway.chat(headers, raw)
        except ClientDisconnect:
            return  # gone before its request was complete: nobody to answer
        except ProxyError as exc:
            response = await on_proxy_error(Request(scope, receive, send), exc)
        except Exception as exc:
            response = await on_unexpected(Request(scope, receive, send), exc)
        await response(scope, receive, send)


def create_app(
    settings: Settings,
    *,
    http_transport: httpx.AsyncBaseTransport | None = None,
    store: SessionStore | None = None,
    engine: ContextEngine | None = None,
    clock: Callable[[], float] = time.time,
) -> CtxgateApp:
    """The ctxgate ASGI app. Injected parts (for tests and embedding) are not closed by it."""
    if engine is None:
        engine = build_engine(settings)  # fail at start-up, not on the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await start_services(
            settings, http_transport=http_transport, store=store, engine=engine, clock=clock
        )
        app.state.services = services
        try:
            yield
        finally:
            await services.close()

    app = CtxgateApp(
        title="ctxgate", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.include_router(router)
    app.include_router(admin_router)
    app.include_router(relay_router)  # last: every other /v1 path goes upstream untouched

    app.add_exception_handler(ProxyError, on_proxy_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app
