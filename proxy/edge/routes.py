"""Thin HTTP handlers; the work happens in Gateway and Conversations."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
import orjson
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.types import Receive

from proxy.doors.registry import BY_PATH
from proxy.edge.services import Services
from proxy.edge.token_count import count_tokens
from session.compaction import manual_answer
from session.errors import (
    BadRequest,
    NotFound,
    PayloadTooLarge,
    ProxyError,
    RequestTimeout,
    UpstreamUnavailable,
)
from session.identity import canonical_session_id, scope_for
from session.ports.headers import upstream_request_headers
from storage import SessionKey, StorageError

router = APIRouter()

# The APIs whose provider answers `GET /models` in OpenAI's `{"data": [...]}` shape.
MODEL_LIST_APIS = ("chat", "responses")


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def header_dict(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI's header list as a dict, decoded once (names arrive lower-cased; a repeated
    header keeps its last value)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in raw}


async def read_body(
    headers: Mapping[str, str], receive: Receive, limit: int, *, timeout_s: float
) -> bytes:
    """The request body, refused with 413 as soon as it exceeds `limit` bytes and with 408
    when `timeout_s` pass without a byte of it arriving."""
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body exceeds ctxgate's limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    loop = asyncio.get_running_loop()
    try:
        # One timer for the whole body, pushed back at every chunk: a stall, not a slow
        # upload, is what times out.
        async with asyncio.timeout(timeout_s) as timer:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(
                        f"The request body exceeds ctxgate's limit of {limit} bytes."
                    )
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
                timer.reschedule(loop.time() + timeout_s)
    except TimeoutError:
        raise RequestTimeout(
            f"The request body stalled: no byte arrived for {timeout_s:g} s."
        ) from None


async def read_request_body(
    services: Services, headers: Mapping[str, str], receive: Receive
) -> bytes:
    """A front door's request body, within the server's size and stall limits."""
    server = services.settings.server
    return await read_body(headers, receive, server.max_body_bytes, timeout_s=server.body_timeout_s)


@router.post("/v1/chat/completions", include_in_schema=True)
@router.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: Request) -> Response:
    """Served by `CtxgateApp` without this router; declared here for the OpenAPI schema."""
    services = services_of(request)
    headers = header_dict(request.scope["headers"])
    raw = await read_request_body(services, headers, request.receive)
    return await services.gateway.serve(BY_PATH[request.url.path], headers, raw)


@router.post("/v1/messages/count_tokens", include_in_schema=True)
@router.post("/messages/count_tokens", include_in_schema=False)
async def messages_count_tokens(request: Request) -> Response:
    """Anthropic's token count: the upstream's, else ctxgate's count of the view it would send."""
    services = services_of(request)
    headers = header_dict(request.scope["headers"])
    raw = await read_request_body(services, headers, request.receive)
    return await count_tokens(services.gateway, headers, raw)


@router.head("/", include_in_schema=False)
async def root_probe() -> Response:
    """Claude Code probes `HEAD /` before its first request."""
    return Response(status_code=200)


@router.get("/v1/models")
@router.get("/models", include_in_schema=False)
async def list_models(request: Request) -> Response:
    """The model lists of the upstreams that serve OpenAI's APIs (the only ones whose `/models`
    answers in this shape) merged with the models the config names; on a duplicate id the first
    upstream's entry wins. An upstream that fails is named in `x-ctxgate-error`; when nothing at
    all can be listed the answer is a 502, not an empty list that looks like a working provider."""
    services = services_of(request)
    services.auth.client_credential(request.headers)
    forward = services.auth.forwardable(request.headers)
    listed = {
        name: up
        for name, up in services.upstreams.items()
        if any(api in MODEL_LIST_APIS for api in up.settings.apis)
    }
    calls = [
        up.call("GET", "/models", None, upstream_request_headers(forward.items(), up.settings))
        for up in listed.values()
    ]
    answers = await asyncio.gather(*calls, return_exceptions=True)
    merged: dict[str, Any] = {}
    failed: list[str] = []
    for name, answer in zip(listed, answers, strict=True):
        data = _model_list(answer)
        if data is None:
            failed.append(f"{name} ({_failure(answer)})")
            continue
        for model in data:
            if isinstance(model, dict) and isinstance(model.get("id"), str):
                merged.setdefault(model["id"], model)
    for rule in services.settings.models:
        if not any(ch in rule.match for ch in "*?["):
            merged.setdefault(
                rule.match,
                {"id": rule.match, "object": "model", "created": 0, "owned_by": rule.upstream},
            )
    if not merged and len(failed) == len(answers):
        reasons = ", ".join(failed) or "no upstream serves the chat or responses API"
        raise UpstreamUnavailable(
            f"No upstream answered its model list and the config names no model: {reasons}.",
            code="models_unavailable",
        )
    headers = {"x-ctxgate-error": f"model list failed: {', '.join(failed)}"[:200]} if failed else {}
    return JSONResponse({"object": "list", "data": list(merged.values())}, headers=headers)


def _model_list(answer: httpx.Response | BaseException) -> list[Any] | None:
    """An upstream's `data` list, or None when its answer is no model list."""
    if isinstance(answer, BaseException) or answer.status_code != 200:
        return None
    try:
        document = orjson.loads(answer.content)
    except orjson.JSONDecodeError:
        return None
    data = document.get("data") if isinstance(document, dict) else None
    return data if isinstance(data, list) else None


def _failure(answer: httpx.Response | BaseException) -> str:
    if isinstance(answer, ProxyError):
        return answer.message
    if isinstance(answer, BaseException):
        return type(answer).__name__
    if answer.status_code != 200:
        return f"answered {answer.status_code}"
    return "no model list in its answer"


@router.get("/healthz")
async def healthz() -> Response:
    # The process id tells which worker of `serve --workers N` answered on this connection.
    return JSONResponse({"status": "ok", "pid": os.getpid()})


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    try:
        await services_of(request).store.ping()
    except StorageError as exc:
        return JSONResponse({"status": "unavailable", "reason": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    body = services_of(request).metrics.render()
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post("/v1/sessions/{session_id}/compress")
async def compress_session(session_id: str, request: Request) -> Response:
    """Compress a session now (its most recent view), optionally around a focus topic; 202
    when the compression is left to the session's next request."""
    services = services_of(request)
    credential = services.auth.client_credential(request.headers)
    raw = await read_body(
        request.headers,
        request.receive,
        64 * 1024,
        timeout_s=services.settings.server.body_timeout_s,
    )
    focus = None
    if raw.strip():
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"The request body is not valid JSON: {exc}") from exc
        focus = payload.get("focus") if isinstance(payload, dict) else None
        if focus is not None and not isinstance(focus, str):
            raise BadRequest("'focus' must be a string.", param="focus")
    key = SessionKey(scope_for(credential), canonical_session_id(session_id, "the path"))
    done = await services.conversations.compress_now(key, focus)
    if done is None:
        raise NotFound(f"No session '{session_id}' is known.", code="session_not_found")
    status, key, answer = manual_answer(done)
    return JSONResponse({"session_id": key.key, **answer}, status_code=status)
