"""Helpers shared by the simulator's own tests (tests/simulator/test_*.py): the models of their
simulator and request builders. The fixtures are in fixtures.py."""

from __future__ import annotations

from typing import Any

import httpx

from .models import ModelSpec

SMALL = 60  # window of the small overflow models: a few short messages fit, a long one does not

MODELS = {
    "gpt-4o-mini": ModelSpec(window=8192),
    "small-openai": ModelSpec(window=SMALL, dialect="openai"),
    "small-vllm": ModelSpec(window=SMALL, dialect="vllm"),
    "small-llamacpp": ModelSpec(window=SMALL, dialect="llamacpp"),
    "small-anthropic": ModelSpec(window=SMALL, dialect="anthropic"),
    "small-anthropic413": ModelSpec(window=SMALL, dialect="anthropic413", max_body_bytes=100_000),
    "small-deepseek": ModelSpec(window=SMALL, dialect="deepseek"),
    "small-tgi": ModelSpec(window=SMALL, dialect="tgi"),
    "factor2": ModelSpec(window=100_000, token_factor=2.0),
    "no-stream-usage": ModelSpec(window=100_000, stream_usage=False),
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def long_text(words: int) -> str:
    return " ".join(f"word{i}" for i in range(words))


def sse_events(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(block[len("data: ") :])
    return events
