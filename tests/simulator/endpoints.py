"""The simulator's answers that no script decides: API-key checks, the models endpoints, unknown
URLs and malformed chat requests, each in OpenAI's error envelope and wording."""

from __future__ import annotations

from typing import Any

from .dialects import tool_pairing_problems
from .exchange import Exchange
from .models import ModelSpec, Received

MODELS_PATHS = ("/v1/models", "/models")
MODEL_PREFIX = "/v1/models/"
UNPARSABLE_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
    "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
    "valid JSON. If you have trouble figuring out how to fix this, please contact us through our "
    "help center at help.openai.com.)"
)
_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an "
    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
    "or as the password "
    "field (with blank username) if you're accessing the API from your browser and are "
    "prompted for a username. You can obtain an API key from "
    "https://platform.openai.com/account/api-keys."
)

Rejection = tuple[int, Any, str]  # status, error body, outcome


def openai_error(
    message: str, type_: str = "invalid_request_error", param: Any = None, code: Any = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def mask_key(key: str) -> str:
    return key[:3] + "*" * 4 + key[-4:] if len(key) > 8 else "*" * len(key)


def presented_key(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key") or headers.get("api-key")


def is_models_path(norm: str) -> bool:
    return norm in MODELS_PATHS or norm.startswith(MODEL_PREFIX)


async def send_auth_error(exchange: Exchange) -> None:
    key = presented_key(exchange.rec.headers)
    if key:
        msg = (
            f"Incorrect API key provided: {mask_key(key)}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )
        payload = openai_error(msg, code="invalid_api_key")
    else:
        payload = openai_error(_NO_KEY)
    await exchange.send_json(401, payload, outcome="unauthorized")


async def send_unknown_url(exchange: Exchange) -> None:
    rec = exchange.rec
    error = openai_error(f"Unknown request URL: {rec.method} {rec.path}.", code="unknown_url")
    await exchange.send_json(404, error, outcome="not_found")


def _model_entry(name: str, spec: ModelSpec) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "provider-simulator",
        "max_model_len": spec.window,
        "context_length": spec.window,
    }


async def send_models(exchange: Exchange, models: dict[str, ModelSpec], norm: str) -> None:
    """``GET /v1/models`` (every configured model) or ``GET /v1/models/{id}``."""
    method = exchange.rec.method
    if method != "GET":
        error = openai_error(f"Method {method} not allowed.")
        await exchange.send_json(405, error, outcome="bad_request")
        return
    if not norm.startswith(MODEL_PREFIX):
        data = [_model_entry(name, spec) for name, spec in models.items()]
        await exchange.send_json(200, {"object": "list", "data": data}, outcome="reply")
        return
    name = norm[len(MODEL_PREFIX) :]
    if name in models:
        await exchange.send_json(200, _model_entry(name, models[name]), outcome="reply")
        return
    error = openai_error(
        f"The model '{name}' does not exist", param="model", code="model_not_found"
    )
    await exchange.send_json(404, error, outcome="not_found")


def chat_rejection(rec: Received, parse_error: bool, validate_messages: bool) -> Rejection | None:
    """OpenAI-style 4xx for a malformed chat request, else None."""
    body = rec.body
    if rec.method != "POST":
        return (
            405,
            openai_error(f"Method {rec.method} not allowed on {rec.path}."),
            "bad_request",
        )
    if parse_error or not isinstance(body, dict):
        return 400, openai_error(UNPARSABLE_JSON), "bad_request"
    for required in ("model", "messages"):
        if required not in body:
            error = openai_error(
                f"Missing required parameter: '{required}'.",
                param=required,
                code="missing_required_parameter",
            )
            return 400, error, "bad_request"
    if not isinstance(body["messages"], list):
        error = openai_error(
            "Invalid type for 'messages': expected an array.",
            param="messages",
            code="invalid_type",
        )
        return 400, error, "bad_request"
    if validate_messages:
        return _pairing_rejection(body["messages"])
    return None


def _pairing_rejection(messages: list[Any]) -> Rejection | None:
    found = tool_pairing_problems(messages)
    if not found:
        return None
    index, _kind, text = found[0]
    return 400, openai_error(text, param=f"messages.[{index}].role"), "invalid_messages"
