"""Tests of the provider simulator's context-overflow errors: each dialect's exact status and
body, and the max_tokens variants."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.simulator import ModelSpec, Reply, Simulator

# Fixtures (fixtures.py says why they are imported "as" themselves).
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import http as http
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.testing import SMALL, long_text, user


def overflow_body(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [user(long_text(60))], **extra}


def expected_overflow(dialect: str, p: int, n: int) -> tuple[int, Any]:
    openai_msg = (
        f"This model's maximum context length is {n} tokens. However, your messages "
        f"resulted in {p} tokens. Please reduce the length of the messages."
    )
    return {
        "openai": (
            400,
            {
                "error": {
                    "message": openai_msg,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        ),
        "vllm": (
            400,
            {
                "error": {
                    "message": (
                        f"This model's maximum context length is {n} tokens. However, your request "
                        f"has {p} input tokens. Please reduce the length of the input messages."
                    ),
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
        ),
        "llamacpp": (
            400,
            {
                "error": {
                    "code": 400,
                    "message": (
                        f"request ({p} tokens) exceeds the available context size ({n} tokens), "
                        "try increasing it"
                    ),
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": p,
                    "n_ctx": n,
                }
            },
        ),
        "anthropic": (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": f"prompt is too long: {p} tokens > {n} maximum",
                },
            },
        ),
        "anthropic413": (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": f"prompt is too long: {p} tokens > {n} maximum",
                },
            },
        ),
        "deepseek": (
            400,
            {
                "error": {
                    "message": (
                        f"This model's maximum context length is {n} tokens. "
                        "However, you requested "
                        f"{p} tokens ({p} in the messages, 0 in the completion). Please reduce the "
                        "length of the messages or completion."
                    ),
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
            },
        ),
        "tgi": (
            422,
            {
                "error": (
                    f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= {n}. "
                    f"Given: {p} `inputs` tokens and 0 `max_new_tokens`"
                ),
                "error_type": "validation",
            },
        ),
    }[dialect]


@pytest.mark.parametrize(
    "dialect", ["openai", "vllm", "llamacpp", "anthropic", "anthropic413", "deepseek", "tgi"]
)
def test_overflow_dialect_exact_body(sim: Simulator, http: httpx.Client, dialect: str) -> None:
    body = overflow_body(f"small-{dialect}")
    p = sim.count_prompt_tokens(body)
    assert p > SMALL
    r = http.post("/chat/completions", json=body)
    status, expected = expected_overflow(dialect, p, SMALL)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert r.json() == expected
    assert sim.received[-1].outcome == "overflow"

    # a request that fits gets an ordinary reply
    ok = http.post(
        "/chat/completions", json={"model": f"small-{dialect}", "messages": [user("hi")]}
    )
    assert ok.status_code == 200


def test_overflow_is_sent_before_streaming(http: httpx.Client) -> None:
    r = http.post("/chat/completions", json=overflow_body("small-openai", stream=True))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_overflow_via_sdk_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="small-openai", messages=[user(long_text(60))])
    assert info.value.status_code == 400
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="small-tgi", messages=[user(long_text(60))])


def test_vllm_max_tokens_variant(sim: Simulator, http: httpx.Client) -> None:
    body = {"model": "small-vllm", "messages": [user("hello")], "max_tokens": 100}
    p = sim.count_prompt_tokens(body)
    assert p < SMALL
    r = http.post("/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": (
                f"'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum "
                f"context length is {SMALL} tokens and your request has {p} input tokens "
                f"(100 > {SMALL} - {p}). None"
            ),
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    # max_completion_tokens is read too; a budget that fits is accepted
    r = http.post(
        "/chat/completions", json={**body, "max_tokens": None, "max_completion_tokens": 99}
    )
    assert r.status_code == 400 and "too large: 99." in r.json()["error"]["message"]
    assert http.post("/chat/completions", json={**body, "max_tokens": 5}).status_code == 200


def test_max_tokens_variants_of_other_dialects(sim: Simulator, http: httpx.Client) -> None:
    def post(model: str) -> tuple[int, Any, int]:
        body = {"model": model, "messages": [user("hello")], "max_tokens": 100}
        r = http.post("/chat/completions", json=body)
        return r.status_code, r.json(), sim.count_prompt_tokens(body)

    status, data, p = post("small-openai")
    assert status == 400 and data["error"]["code"] == "context_length_exceeded"
    assert data["error"]["message"] == (
        f"This model's maximum context length is {SMALL} tokens. However, you requested {p + 100} "
        f"tokens ({p} in the messages, 100 in the completion). Please reduce the length of the "
        "messages or completion."
    )
    status, data, p = post("small-anthropic")
    assert status == 400 and data == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": (
                f"input length and `max_tokens` exceed context limit: {p} + 100 > {SMALL}, "
                "decrease input length or `max_tokens` and try again"
            ),
        },
    }
    status, data, p = post("small-deepseek")
    assert (
        status == 400
        and f"({p} in the messages, 100 in the completion)" in data["error"]["message"]
    )
    status, data, p = post("small-tgi")
    assert status == 422 and data["error"].endswith(
        f"Given: {p} `inputs` tokens and 100 `max_new_tokens`"
    )
    status, data, _ = post("small-llamacpp")  # llama.cpp only checks the prompt
    assert status == 200


def test_anthropic413_body_bytes(sim: Simulator, http: httpx.Client) -> None:
    sim.models["tiny-bytes"] = ModelSpec(window=100_000, dialect="anthropic413", max_body_bytes=500)
    try:
        big = {"model": "tiny-bytes", "messages": [user("z" * 600)]}
        r = http.post("/chat/completions", json=big)
        assert r.status_code == 413
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == "request_too_large"
        assert err["error"]["message"].startswith(
            "Request exceeds the maximum allowed number of bytes."
        )
        assert (
            http.post(
                "/chat/completions", json={"model": "tiny-bytes", "messages": [user("hi")]}
            ).status_code
            == 200
        )
    finally:
        del sim.models["tiny-bytes"]
    assert ModelSpec(window=1000, dialect="anthropic413").body_limit == 4000


def test_overflow_does_not_consume_queue(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Reply(content="scripted"))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="small-openai", messages=[user(long_text(60))])
    assert sim.queued == 1
    resp = client.chat.completions.create(model="small-openai", messages=[user("hi")])
    assert resp.choices[0].message.content == "scripted"


def test_unknown_dialect_rejected() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        ModelSpec(window=10, dialect="nope")
