"""Building the ASGI app: services started in the lifespan, routes, one error mapping."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from compression import ContextEngine
from proxy.doors.registry import BY_PATH, Door
from proxy.edge.admin import router as admin_router
from proxy.edge.gemini_routes import ENVELOPE as GEMINI_ENVELOPE
from proxy.edge.gemini_routes import door_for as gemini_door
from proxy.edge.gemini_routes import is_gemini_path, is_generate_path
from proxy.edge.gemini_routes import router as gemini_router
from proxy.edge.relay import router as relay_router
from proxy.edge.responses_routes import router as responses_router
from proxy.edge.routes import header_dict, read_request_body, router
from proxy.edge.services import Services, build_engine, start_services
from proxy.http_errors import error_response, invalid_request, log_refusal
from session.config.settings import Settings
from session.errors import ProxyError
from storage import SessionStore

log = logging.getLogger("ctxgate")


async def on_proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    path = request.url.path
    log_refusal(request.method, path, exc)
    door = BY_PATH.get(path)
    services = getattr(request.app.state, "services", None)
    if services is not None and (door is not None or is_generate_path(path)):
        # The counter is the model APIs' requests: an admin or relay error is none of them.
        services.metrics.finished(exc.status_code)
    if door is None and is_gemini_path(path):
        door = GEMINI_ENVELOPE
    return error_response(exc, envelope=door.error_body if door is not None else None)


async def on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    error = invalid_request(exc)
    log_refusal(request.method, request.url.path, error)
    return error_response(error)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    error = ProxyError(str(exc.detail))
    error.status_code = exc.status_code
    error.type = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    log_refusal(request.method, request.url.path, error)
    return error_response(error)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s", request.url.path)
    return error_response(ProxyError("ctxgate hit an internal error; see its log."))


class CtxgateApp(FastAPI):
    """FastAPI, except that the front doors' POST routes skip its router and middleware stack.

    Every request of an agent goes through one of those routes; FastAPI's dispatch (a dozen
    middleware and routing layers, a Request object, header lookups that decode the raw list
    each time) costs a few hundred microseconds of it. Errors map through the same handlers.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            door = BY_PATH.get(scope["path"]) or gemini_door(scope)
            if door is not None:
                scope["app"] = self
                await self._serve(door, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _serve(self, door: Door, scope: Scope, receive: Receive, send: Send) -> None:
        services: Services = self.state.services
        try:
            headers = header_dict(scope["headers"])
            raw = await read_request_body(services, headers, receive)
            response = await services.gateway.serve(door, headers, raw)
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
    app.include_router(responses_router)
    app.include_router(admin_router)
    app.include_router(gemini_router)
    app.include_router(relay_router)  # last: every other /v1 path goes upstream untouched

    app.add_exception_handler(ProxyError, on_proxy_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app
