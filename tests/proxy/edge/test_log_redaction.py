"""Credentials never reach the log, in whatever notation they slipped into a line."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest

from proxy.edge.logs import JsonFormatter, PlainFormatter, redact
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

SECRETS = {
    "Authorization: Bearer tok_9f8e7d6c5b4a3": "tok_9f8e7d6c5b4a3",
    "authorization=Bearer eyJraWQiOiJ4In0abc": "eyJraWQiOiJ4In0abc",
    "Authorization: Basic dXNlcjpodW50ZXIy": "dXNlcjpodW50ZXIy",
    "Proxy-Authorization: Bearer zz_token_77": "zz_token_77",
    "aws key AKIAIOSFODNN7EXAMPLE in use": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCY",
    "login with password=hunter2!": "hunter2!",
    '{"password": "correct horse", "user": "bob"}': "correct horse"[:7],
    "client_secret: 0a1b2c3d4e": "0a1b2c3d4e",
    "https://api.example.com/x?token=abc123xyz&q=1": "abc123xyz",
    "secret=shh-its-me": "shh-its-me",
    "refresh_token='r-123456789'": "r-123456789",
    "x-api-key: sk-ant-api03-abcdefghijklmnop": "abcdefghijklmnop",
    "api-key: 0123456789abcdef": "0123456789abcdef",
    "postgresql+asyncpg://ctx:pa55w0rd@db:5432/ctx": "pa55w0rd",
    "use sk-proj-AbCdEfGhIjKlMnOp1234": "AbCdEfGhIjKlMnOp1234",
    "GOOGLE AIzaSyA1234567890abcdefghijklmnopqrstu": "AIzaSyA1234567890abcdefghijklmnopqrstu",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789": "abcdefghijklmnopqrstuvwxyz0123",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl": "c2lnbmF0dXJl",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----": "MIIEow",
}


@pytest.mark.parametrize(("line", "secret"), list(SECRETS.items()))
def test_credentials_are_masked_in_every_common_form(line: str, secret: str) -> None:
    masked = redact(line)
    assert secret not in masked
    assert "[redacted]" in masked


@pytest.mark.parametrize(
    "line",
    [
        "session auto-1a2b3c forwards 12 messages",
        "compressed 1200 -> 300 tokens; tokens_before=1200 tokens_after=300",
        "the token count of the system prompt",
        "upstream 'sim' answered 429",
    ],
)
def test_ordinary_lines_are_left_alone(line: str) -> None:
    assert redact(line) == line


def test_both_formatters_redact() -> None:
    record = logging.LogRecord(
        "ctxgate", logging.INFO, __file__, 1, "Authorization: Bearer %s", ("tok_secret_1",), None
    )
    assert "tok_secret_1" not in JsonFormatter().format(record)
    assert "tok_secret_1" not in PlainFormatter().format(record)


def test_logged_content_is_redacted_end_to_end(sim: Simulator, db_path: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ctxgate.gateway")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    content = (
        "deploy with AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE, db password=hunter2 "
        "and header Authorization: Bearer tok_live_0123456789"
    )
    settings = settings_for(sim.base_url, db_path, logging={"log_content": True, "json": True})
    try:
        with ProxyServer(settings) as proxy:
            response = httpx.post(
                proxy.base_url + "/chat/completions",
                json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}]},
                timeout=10,
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert response.status_code == 200
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    forwarded = [line["msg"] for line in lines if "forwards" in line["msg"]]
    assert forwarded, lines
    for secret in ("AKIAIOSFODNN7EXAMPLE", "hunter2", "tok_live_0123456789"):
        assert secret not in forwarded[0]
    assert "AWS_ACCESS_KEY_ID" in forwarded[0]  # what was masked stays recognisable


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        ("export DB_PASSWORD=hunter2x9", "hunter2x9"),
        ("settings.x_api_key: 0123abcd9876", "0123abcd9876"),
        ('{"content": "login password=\\"s3cr3t-pw\\" please"}', "s3cr3t-pw"),
        ("GET /v1beta/models/m:generateContent?alt=sse&key=my-gemini-key-42", "my-gemini-key-42"),
        ("search terms: akiaiosfodnn7example aizasya1234567890abcdefghijklmnopqrstu", "akiaios"),
        ("search terms: ghp_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijkl"),
    ],
)
def test_names_inside_longer_names_escaped_quotes_and_lower_case_copies(
    line: str, secret: str
) -> None:
    assert secret not in redact(line)


def test_a_masked_secret_is_masked_again_wherever_a_copy_of_it_turns_up() -> None:
    assert "Qz9xWv7Lp2Rt" not in redact("token=sk-proj-Qz9xWv7Lp2Rt88aa and DB_PASS: n0tInRules")
    # The search index's copies: lower case, cut at punctuation.
    later = redact("terms: proj qz9xwv7lp2rt88aa sk-proj-qz9xwv7lp2rt88aa")
    assert "qz9xwv7lp2rt88aa" not in later
    # Common words of a secret are not remembered as secrets of their own.
    assert redact("the project is fine") == "the project is fine"
