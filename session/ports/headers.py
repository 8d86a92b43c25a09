"""Which headers cross the proxy, in each direction (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from session.config.settings import UpstreamSettings

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)

# Recomputed or owned by ctxgate's side of each connection.
_REQUEST_DROP = HOP_BY_HOP | {
    "host",
    "content-length",
    "content-encoding",
    "accept-encoding",
    "cookie",
}
# The client's credential headers: forwarded only to an upstream without a key of its own.
_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "content-encoding", "server", "date"}


def _connection_named(headers: Iterable[tuple[str, str]]) -> set[str]:
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


def upstream_request_headers(
    client: Iterable[tuple[str, str]], upstream: UpstreamSettings
) -> dict[str, str]:
    """Headers to send upstream: the client's end-to-end headers plus upstream credentials."""
    items = list(client)
    drop = _REQUEST_DROP | _connection_named(items)
    if upstream.api_key:
        drop |= _CREDENTIALS
    out: dict[str, str] = {}
    for name, value in items:
        lower = name.lower()
        if lower in drop or lower.startswith(("x-stainless-", "x-ctxgate-")):
            continue
        out[lower] = value
    out["accept-encoding"] = "identity"
    out.update({k.lower(): v for k, v in upstream.headers.items()})
    if upstream.api_key and upstream.auth in ("x-api-key", "x-goog-api-key"):
        out[upstream.auth] = upstream.api_key
    elif upstream.api_key:
        out["authorization"] = f"Bearer {upstream.api_key}"
    return out


def wire_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """Headers as bytes for the HTTP client, each value exactly as the client sent it.

    Incoming values are decoded as Latin-1, which maps every byte to one character, so
    encoding them back gives the original bytes (UTF-8 text in `X-Title` or `User-Agent`
    included). Only a value from the config can hold other characters: it goes as UTF-8.
    """
    return [(name.encode("latin-1"), _value_bytes(value)) for name, value in headers.items()]


def _value_bytes(value: str) -> bytes:
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def client_response_headers(upstream: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Upstream response headers worth relaying to the client (rate limits, request ids…)."""
    items = list(upstream)
    drop = _RESPONSE_DROP | _connection_named(items)
    return {name.lower(): value for name, value in items if name.lower() not in drop}


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential a client presented, from `Authorization: Bearer`, `x-api-key` or
    Google's `x-goog-api-key`."""
    value = headers.get("authorization")
    if value:
        scheme, _, token = value.partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else value.strip()
    return headers.get("x-api-key") or headers.get("api-key") or headers.get("x-goog-api-key")
