"""The Gemini API's routes (base URL `http://ctxgate` for Gemini CLI's
`GOOGLE_GEMINI_BASE_URL`; the SDK adds `/v1beta`):

    POST /v1beta/models/{model}:generateContent         the front door (proxy.doors.gemini)
    POST /v1beta/models/{model}:streamGenerateContent   the front door, streamed (`alt=sse`)
    POST /v1beta/models/{model}:countTokens             relayed; ctxgate counts when it is 404
    *    /v1beta/...                                    relayed (the model list, a model, …)

The door's two routes are served by `CtxgateApp` ahead of the router (`door_for`). The
upstream is the model's, else the first that lists `gemini` in its `apis`. A key in the query
(`?key=`) counts as the `x-goog-api-key` header: checked, forwarded or replaced by the same
rules as any client credential, and never left in a forwarded URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Scope

from proxy.doors.gemini.checks import api_key
from proxy.doors.gemini.gemini_door import GENERATE, STREAM, GeminiDoor
from proxy.edge.relay import answered, relay_headers, relayed
from proxy.edge.routes import header_dict, read_body, services_of
from proxy.edge.services import Services
from proxy.http_errors import error_response
from proxy.provider.upstream import Upstream
from session.errors import BadRequest, ProxyError, unknown_model
from session.ports.headers import upstream_request_headers

router = APIRouter()

_API = "gemini"
_PREFIXES = ("/v1beta/", "/v1/")
_KEY_HEADER = "x-goog-api-key"
_ACTION = re.compile(r"^/(?:v1beta|v1)/models/([^/:]*):([A-Za-z]+)$")
_MODEL = re.compile(r"^/(?:v1beta|v1)/(?:models|tunedModels)/([^/:]*)")
ENVELOPE = GeminiDoor()  # writes ctxgate's own errors on Gemini paths


def is_gemini_path(path: str) -> bool:
    return path.startswith("/v1beta/") or _ACTION.match(path) is not None


def is_generate_path(path: str) -> bool:
    """A `generateContent` or `streamGenerateContent` path: a model request."""
    found = _ACTION.match(path)
    return found is not None and found.group(2) in (GENERATE, STREAM)


def door_for(scope: Scope) -> GeminiDoor | None:
    """The door for a `generateContent` or `streamGenerateContent` path, else None; a key in
    the query moves into the scope's headers. A request the door must refuse (a malformed key,
    no model) gets a door that refuses it once its body is read, so that the answer is a 400
    in Google's envelope on a connection that stays open."""
    found = _ACTION.match(scope["path"])
    if found is None or found.group(2) not in (GENERATE, STREAM):
        return None
    stream = found.group(2) == STREAM
    try:
        query = _key_to_header(scope)
        model = _model_named(found.group(1))
    except BadRequest as exc:
        return GeminiDoor.at("", stream, refused=exc)
    kept = urlencode([(k, v) for k, v in query if k != "alt"])
    return GeminiDoor.at(model, stream, kept)


def _model_named(model: str) -> str:
    if not model:
        raise BadRequest("* GenerateContentRequest.model: model is required (the path names none).")
    return model


def _key_to_header(scope: Scope) -> list[tuple[str, str]]:
    """The query without `key`, which becomes the `x-goog-api-key` header when the request
    has none; raises BadRequest when either key cannot be one."""
    query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    key = next((v for k, v in query if k == "key"), None)
    headers = scope["headers"]
    given = [value for name, value in headers if name.lower() == _KEY_HEADER.encode()]
    for value in given:
        api_key(value.decode("latin-1"), f"the {_KEY_HEADER} header")
    if key:
        api_key(key, "the `key` query parameter")
        if not given:
            scope["headers"] = [*headers, (_KEY_HEADER.encode(), key.encode("ascii"))]
    return [(k, v) for k, v in query if k != "key"]


@router.api_route(
    "/v1beta/{path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
async def gemini_relay(request: Request, path: str) -> Response:
    """countTokens (counted here when the upstream lacks it), and every other Gemini call
    relayed untouched."""
    try:
        return await _serve(request)
    except ProxyError as exc:
        return error_response(exc, envelope=ENVELOPE.error_body)


async def _serve(request: Request) -> Response:
    services = services_of(request)
    server = services.settings.server
    # The body first: a refusal then leaves nothing unread on the keep-alive connection.
    body = await read_body(
        header_dict(request.scope["headers"]),
        request.receive,
        server.max_body_bytes,
        timeout_s=server.body_timeout_s,
    )
    query = _key_to_header(request.scope)
    headers = header_dict(request.scope["headers"])
    services.auth.client_credential(headers)
    scope_path = request.scope["path"]
    if any(segment in (".", "..") for segment in scope_path.split("/")):
        raise BadRequest("The request path must not contain '.' or '..' segments.")
    found = _MODEL.match(scope_path)
    model = _model_named(found.group(1)) if found else None
    upstream = _upstream(services, model)
    target = scope_path[scope_path.index("/", 1) :]
    if query:
        target += "?" + urlencode(query)
    out = relay_headers(headers, services.auth.forwardable(headers), upstream)
    action = _ACTION.match(scope_path)
    if action is not None and action.group(2) == "countTokens" and request.method == "POST":
        return await _count_tokens(services, upstream, action.group(1), target, headers, body)
    return await relayed(upstream, request.method, target, body, out)


def _upstream(services: Services, model: str | None) -> Upstream:
    rule = services.settings.rule_for(model) if model else None
    if rule is not None and _API in services.settings.upstreams[rule.upstream].apis:
        return services.upstreams[rule.upstream]
    serving = [up for up in services.upstreams.values() if _API in up.settings.apis]
    if not serving:
        raise BadRequest(
            f"No upstream lists '{_API}' in its `upstreams.NAME.apis`: ctxgate has nowhere "
            "to send this Gemini API request.",
            code="api_not_served",
        )
    return serving[0]


async def _count_tokens(
    services: Services,
    upstream: Upstream,
    model: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
) -> Response:
    """The upstream's count; where it has no such endpoint (404), ctxgate's own count of the
    contents (and, in a `generateContentRequest`, the system instruction and tools)."""
    forward = services.auth.forwardable(headers)
    sent = upstream_request_headers(forward.items(), upstream.settings)
    answer = await upstream.call("POST", target, body, sent)
    if answer.status_code != 404:
        return answered(answer)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}") from exc
    inner = parsed.get("generateContentRequest") if isinstance(parsed, dict) else None
    request = GeminiDoor.at(model, False).parse(orjson.dumps(inner) if inner else body)
    rule = services.settings.rule_for(model)
    if rule is None:
        raise unknown_model(model)
    counter = services.models.counter(rule, model)
    tokens = counter.count_messages(request.messages, request.tools)
    return Response(orjson.dumps({"totalTokens": tokens}), media_type="application/json")
