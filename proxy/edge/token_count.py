"""`POST /v1/messages/count_tokens`: relayed to the upstream; where the upstream lacks the
endpoint (404), answered with ctxgate's own count of the view it would forward."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

from proxy.doors.registry import BY_API
from proxy.gateway.gateway import Gateway, served_rule
from proxy.http_errors import error_response
from session.errors import ProxyError
from session.identity import identify, scope_for
from session.ports.headers import client_response_headers, upstream_request_headers

UPSTREAM_PATH = "/messages/count_tokens"
_DOOR = BY_API["messages"]


async def count_tokens(gateway: Gateway, headers: Mapping[str, str], raw: bytes) -> Response:
    """The count, or ctxgate's own error in the Messages envelope."""
    try:
        return await _count(gateway, headers, raw)
    except ProxyError as exc:
        return error_response(exc, envelope=_DOOR.error_body)


async def _count(gateway: Gateway, headers: Mapping[str, str], raw: bytes) -> Response:
    credential = gateway.auth.client_credential(headers)
    request = _DOOR.parse(raw)
    rule = served_rule(gateway.settings, request.model, _DOOR.api)
    upstream = gateway.conversations.upstreams[rule.upstream]
    forward = gateway.auth.forwardable(headers)
    sent = upstream_request_headers(forward.items(), upstream.settings)
    answer = await upstream.call("POST", UPSTREAM_PATH, raw, sent)
    if answer.status_code != 404:
        return Response(
            answer.content,
            status_code=answer.status_code,
            headers={
                k: v
                for k, v in client_response_headers(answer.headers.items()).items()
                if k != "content-type"
            },
            media_type=answer.headers.get("content-type", "application/json"),
        )
    ident = identify(headers, request.session_hint, request.messages, scope_for(credential))
    turn = await gateway.conversations.prepare(_DOOR, ident, request, rule, forward)
    counter = gateway.conversations.models.counter(rule, request.model)
    tokens = counter.count_messages(turn.view, request.tools)
    return Response(orjson.dumps({"input_tokens": tokens}), media_type="application/json")
