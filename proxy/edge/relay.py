"""Every other call under `/v1`, relayed to an upstream untouched.

Embeddings, text completions, `/v1/models/{id}`, files, audio, batches, whatever a provider
serves: an SDK pointed at ctxgate works for every call, not only chat. Registered after every
other route, so ctxgate's own endpoints win.

The upstream is the one the model rules give for the request's model (the JSON body's `model`,
or the id in `/v1/models/{id}`), else the first upstream configured. A JSON body is read to find
its model (within `server.max_body_bytes`); any other body (multipart uploads, audio) streams
through as it arrives, never held whole in memory. The answer's status, headers and bytes are
relayed as they come, streamed answers included. The other routes that relay a call (the
Gemini API's, the Responses API's) use the same parts: `relay_headers`, `relayed`, `answered`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import httpx
import orjson
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive

from proxy.doors.streaming import EventStreamResponse
from proxy.edge.routes import header_dict, read_body, services_of
from proxy.provider.upstream import Upstream
from session.errors import BadRequest, RequestTimeout, unknown_model
from session.ports.headers import client_response_headers, upstream_request_headers

if TYPE_CHECKING:
    from session.config.settings import Settings

router = APIRouter()

PREFIX = "/v1"
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_MODEL_PATH = "/v1/models/"
# What a relayed body keeps of the client's framing (the chat route re-serializes; here the
# bytes go as they came).
_BODY_HEADERS = ("content-length", "content-encoding")


def model_of(path: str, body: bytes | None, content_type: str) -> tuple[str | None, bool]:
    """The model a request is for, and whether it came from the path rather than the body:
    the JSON body's `model`, or the id of `/v1/models/{id}`."""
    if path.startswith(_MODEL_PATH) and len(path) > len(_MODEL_PATH):
        return path[len(_MODEL_PATH) :], True
    if not body or "json" not in content_type:
        return None, False
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, False  # the upstream will say what is wrong with it
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return (model if isinstance(model, str) else None), False


def upstream_name(settings: Settings, model: str | None, from_path: bool) -> str:
    """The upstream for `model`: its rule's, else the first configured.

    A body naming a model no rule matches is refused, as on the chat route; a model id in the
    path of `/v1/models/{id}` just goes to the first upstream, which answers for it.
    """
    rule = settings.rule_for(model) if model is not None else None
    if rule is not None:
        return rule.upstream
    if model is not None and not from_path:
        raise unknown_model(model)
    return next(iter(settings.upstreams))


def upstream_target(path: str, raw_path: bytes, query: bytes) -> str:
    """The path under the upstream's base URL (which ends in `/v1`), as the client wrote it,
    with the query. A dot segment, written plainly or percent-encoded, could climb out of
    `/v1` on the provider's host: refused."""
    if any(segment in (".", "..") for segment in path.split("/")):
        raise BadRequest("The request path must not contain '.' or '..' segments.")
    raw = raw_path.decode("latin-1") or path
    target = raw[len(PREFIX) :]
    return target + "?" + query.decode("latin-1") if query else target


async def _streamed_body(receive: Receive, timeout_s: float) -> AsyncIterator[bytes]:
    """The request body as it arrives; `timeout_s` without a byte ends it with a 408."""
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                message = await receive()
        except TimeoutError:
            raise RequestTimeout(
                f"The request body stalled: no byte arrived for {timeout_s:g} s."
            ) from None
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body", False):
            return


@router.api_route(PREFIX + "/{path:path}", methods=_METHODS, include_in_schema=False)
async def relay(request: Request) -> Response:
    """Relay the request to its upstream and its answer back, both untouched."""
    services = services_of(request)
    server = services.settings.server
    headers = header_dict(request.scope["headers"])
    services.auth.client_credential(headers)
    scope = request.scope
    target = upstream_target(scope["path"], scope.get("raw_path") or b"", scope["query_string"])
    content_type = headers.get("content-type", "")
    body: bytes | AsyncIterator[bytes]
    if content_type and "json" not in content_type:
        # Uploads (multipart, audio): streamed through, so only the stall bound applies.
        body = _streamed_body(request.receive, server.body_timeout_s)
        model, from_path = model_of(request.url.path, None, content_type)
    else:
        body = await read_body(
            headers, request.receive, server.max_body_bytes, timeout_s=server.body_timeout_s
        )
        model, from_path = model_of(request.url.path, body, content_type)
    upstream = services.upstreams[upstream_name(services.settings, model, from_path)]
    out = relay_headers(headers, services.auth.forwardable(headers), upstream)
    return await relayed(upstream, request.method, target, body, out)


def relay_headers(
    client: Mapping[str, str], forward: Mapping[str, str], upstream: Upstream
) -> dict[str, str]:
    """The headers a relayed request sends: the forwardable ones, with the client's own body
    framing and accepted encodings (the bytes go on as they came)."""
    out = upstream_request_headers(forward.items(), upstream.settings)
    for name in _BODY_HEADERS:
        if name in client:
            out[name] = client[name]
    out.pop("accept-encoding", None)
    if "accept-encoding" in client:
        out["accept-encoding"] = client["accept-encoding"]
    return out


async def relayed(
    upstream: Upstream,
    method: str,
    target: str,
    body: bytes | AsyncIterator[bytes],
    headers: Mapping[str, str],
) -> Response:
    """The upstream's answer to a relayed request, streamed to the client as it comes."""
    stack = AsyncExitStack()
    try:
        response = await stack.enter_async_context(upstream.relay(method, target, body, headers))
    except BaseException:
        await stack.aclose()
        raise
    out = client_response_headers(response.headers.items())
    out.setdefault("content-type", "application/octet-stream")
    if "content-encoding" in response.headers:
        out["content-encoding"] = response.headers["content-encoding"]

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await stack.aclose()

    return EventStreamResponse(chunks(), response.status_code, out)


def answered(answer: httpx.Response, extra: Mapping[str, str] | None = None) -> Response:
    """A buffered upstream answer as the client gets it: its status, bytes and content type,
    the headers a client may see, and `extra`."""
    out = client_response_headers(answer.headers.items())
    out.pop("content-type", None)
    out.update(extra or {})
    return Response(
        answer.content,
        status_code=answer.status_code,
        headers=out,
        media_type=answer.headers.get("content-type", "application/json"),
    )
