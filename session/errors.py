"""ctxgate's error tree, each error with its OpenAI envelope; `proxy.http_errors` maps it to HTTP.

    ProxyError                       500 server_error
    ├── BadRequest                   400 invalid_request_error
    ├── Unauthorized                 401 authentication_error
    ├── NotFound                     404 not_found_error
    ├── RequestTimeout               408 invalid_request_error (the body stalled; closes)
    ├── PayloadTooLarge              413 invalid_request_error
    ├── UpstreamUnavailable          502 upstream_error
    ├── UpstreamTimeout              504 upstream_error
    └── UpstreamStatus               the upstream's own status and body, relayed as they came

Statuses the OpenAI SDK retries (408/409/429/5xx) are used only where a retry can help.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson


class ProxyError(Exception):
    status_code = 500
    type = "server_error"
    code: str | None = None
    # The headers of the session the request was in (`x-session-id`, `x-ctxgate-compressed`),
    # set once the session is known; the answer carries them beside the error's own.
    session_headers: Mapping[str, str] = {}

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return orjson.dumps({"error": error})

    def headers(self) -> Mapping[str, str]:
        return {}


class BadRequest(ProxyError):
    status_code = 400
    type = "invalid_request_error"


class Unauthorized(ProxyError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(ProxyError):
    status_code = 404
    type = "not_found_error"


class RequestTimeout(ProxyError):
    """The client stopped sending its request body; the connection is closed after the answer,
    since whatever it sends later can no longer be framed."""

    status_code = 408
    type = "invalid_request_error"
    code = "request_timeout"

    def headers(self) -> Mapping[str, str]:
        return {"connection": "close"}


def unknown_model(model: str) -> NotFound:
    """The answer for a model no rule of the config matches."""
    return NotFound(
        f"The model '{model}' does not match any rule in ctxgate's config.",
        param="model",
        code="model_not_found",
    )


class PayloadTooLarge(ProxyError):
    status_code = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UpstreamUnavailable(ProxyError):
    status_code = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTimeout(ProxyError):
    status_code = 504
    type = "upstream_error"
    code = "upstream_timeout"


class UpstreamStatus(ProxyError):
    """An error answer from the upstream, relayed with its status, body and useful headers."""

    def __init__(self, status_code: int, body: bytes, headers: Mapping[str, str]) -> None:
        super().__init__(f"upstream answered {status_code}")
        self.status_code = status_code
        self.raw = body
        self.raw_headers = dict(headers)

    def body(self) -> bytes:
        return self.raw

    def headers(self) -> Mapping[str, str]:
        return self.raw_headers
