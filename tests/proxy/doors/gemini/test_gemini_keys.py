"""Gemini's key header in the settings and on the way upstream (pure)."""

from __future__ import annotations

import pytest

from proxy.config_file import SettingsError, parse_settings
from session.config.settings import UpstreamSettings
from session.ports.headers import bearer_token, upstream_request_headers


def _upstream(**fields: object) -> UpstreamSettings:
    document = {
        "upstreams": {
            "g": {"base_url": "https://generativelanguage.googleapis.com/v1beta", **fields}
        },
        "models": [{"match": "*", "upstream": "g"}],
    }
    return parse_settings(document, {}).upstreams["g"]


def test_a_gemini_only_upstream_sends_its_key_in_googles_header() -> None:
    upstream = _upstream(apis=["gemini"], api_key="up-key")
    assert upstream.auth == "x-goog-api-key"
    sent = upstream_request_headers(
        [("x-goog-api-key", "client-key"), ("authorization", "Bearer other")],
        upstream,
    )
    assert sent["x-goog-api-key"] == "up-key" and "authorization" not in sent


def test_without_its_own_key_the_clients_is_forwarded() -> None:
    upstream = _upstream(apis=["gemini"])
    sent = upstream_request_headers([("x-goog-api-key", "client-key")], upstream)
    assert sent["x-goog-api-key"] == "client-key"
    assert bearer_token({"x-goog-api-key": "client-key"}) == "client-key"


def test_an_unknown_auth_style_names_the_three() -> None:
    with pytest.raises(SettingsError, match="bearer, x-api-key or x-goog-api-key"):
        _upstream(apis=["gemini"], auth="query")
    assert _upstream(apis=["chat", "gemini"]).auth == "bearer"
