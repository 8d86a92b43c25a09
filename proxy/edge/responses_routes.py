"""The Responses API's other routes: compaction served here, the rest relayed as they are.

    POST   /v1/responses/compact              ctxgate's compressor (proxy.edge.responses_compaction)
    POST   /v1/responses/input_tokens         relayed to the model's upstream
    GET    /v1/responses/{id}                 relayed (also DELETE, /input_items, /cancel)

A stored response lives on one provider and its id names no model: such a route goes to the
upstreams that serve `responses`, in config order, until one knows the id (answers other
than 404). `POST /v1/responses` itself is the front door (proxy.doors.responses).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from proxy.edge.relay import answered
from proxy.edge.responses_compaction import compact
from proxy.edge.routes import header_dict, read_request_body, services_of
from proxy.gateway.gateway import served_rule
from proxy.provider.upstream import Upstream
from session.errors import BadRequest
from session.ports.headers import upstream_request_headers

router = APIRouter()
_API = "responses"


@router.post("/v1/responses/compact")
@router.post("/responses/compact", include_in_schema=False)
async def responses_compact(request: Request) -> Response:
    services = services_of(request)
    headers = header_dict(request.scope["headers"])
    raw = await read_request_body(services, headers, request.receive)
    return await compact(services, headers, raw)


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens", include_in_schema=False)
async def responses_input_tokens(request: Request) -> Response:
    services = services_of(request)
    headers = header_dict(request.scope["headers"])
    raw = await read_request_body(services, headers, request.receive)
    model = _model_of(raw)
    upstream = None
    if model:
        upstream = services.upstreams[served_rule(services.settings, model, _API).upstream]
    candidates = [upstream] if upstream is not None else _serving(services.upstreams)
    return await _relay(candidates, request, headers, raw)


@router.get("/v1/responses/{response_id}")
@router.get("/responses/{response_id}", include_in_schema=False)
async def responses_retrieve(request: Request, response_id: str) -> Response:
    return await _relay_stored(request)


@router.delete("/v1/responses/{response_id}")
@router.delete("/responses/{response_id}", include_in_schema=False)
async def responses_delete(request: Request, response_id: str) -> Response:
    return await _relay_stored(request)


@router.get("/v1/responses/{response_id}/input_items")
@router.get("/responses/{response_id}/input_items", include_in_schema=False)
async def responses_input_items(request: Request, response_id: str) -> Response:
    return await _relay_stored(request)


@router.post("/v1/responses/{response_id}/cancel")
@router.post("/responses/{response_id}/cancel", include_in_schema=False)
async def responses_cancel(request: Request, response_id: str) -> Response:
    return await _relay_stored(request)


async def _relay_stored(request: Request) -> Response:
    services = services_of(request)
    headers = header_dict(request.scope["headers"])
    raw = await read_request_body(services, headers, request.receive)
    return await _relay(_serving(services.upstreams), request, headers, raw)


def _model_of(raw: bytes) -> str | None:
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from exc
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and model else None


def _serving(upstreams: Mapping[str, Upstream]) -> list[Upstream]:
    found = [up for up in upstreams.values() if _API in up.settings.apis]
    if not found:
        raise BadRequest(
            f"No upstream lists '{_API}' in its `upstreams.NAME.apis`: ctxgate has nowhere "
            "to send this Responses API request.",
            code="api_not_served",
        )
    return found


async def _relay(
    candidates: list[Upstream], request: Request, headers: Mapping[str, str], raw: bytes
) -> Response:
    services = services_of(request)
    services.auth.client_credential(headers)
    forward = services.auth.forwardable(headers)
    path = request.url.path.removeprefix("/v1")
    if request.url.query:
        path = f"{path}?{request.url.query}"
    answer = None
    for upstream in candidates:
        sent = upstream_request_headers(forward.items(), upstream.settings)
        answer = await upstream.call(request.method, path, raw or None, sent)
        if answer.status_code != 404:
            break
    assert answer is not None  # `candidates` is never empty
    return answered(answer)
