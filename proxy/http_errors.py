"""The one mapping from ctxgate's errors (`session.errors`) to HTTP responses."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from session.errors import BadRequest, ProxyError, UpstreamStatus

log = logging.getLogger("ctxgate.requests")


def error_response(
    exc: ProxyError,
    extra_headers: Mapping[str, str] | None = None,
    envelope: Callable[[ProxyError], bytes] | None = None,
) -> Response:
    """The one mapping from a ProxyError to an HTTP response.

    `envelope` writes ctxgate's own errors in the shape of the API that was called (a front
    door's); an upstream's error is relayed as it came, whatever the API.
    """
    headers = {**exc.headers(), **exc.session_headers, **(extra_headers or {})}
    headers.pop("content-length", None)
    headers.pop("content-type", None)
    own = envelope is not None and not isinstance(exc, UpstreamStatus)
    body = envelope(exc) if own and envelope is not None else exc.body()
    return Response(
        body, status_code=exc.status_code, headers=headers, media_type="application/json"
    )


def invalid_request(exc: RequestValidationError) -> BadRequest:
    """FastAPI's validation error as a BadRequest naming the parameter (no internals)."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    if first.get("type") == "json_invalid":
        return BadRequest("The request body is not valid JSON.")
    where, name = (loc[0], ".".join(loc[1:])) if len(loc) > 1 else ("request", "")
    message = f"{first.get('msg', 'Invalid value')} ({where} parameter '{name}')."
    return BadRequest(message, param=name or None)


def log_refusal(method: str, path: str, exc: ProxyError) -> None:
    """One info line for each request answered with an error: who said no and why. Never the
    request's content: the path without its query (a Gemini key may ride there)."""
    if isinstance(exc, UpstreamStatus):
        log.info("%s %s -> %d from the upstream, relayed", method, path, exc.status_code)
    else:
        log.info("%s %s -> %d %s: %s", method, path, exc.status_code, exc.type, exc.message)
