"""Fixtures shared by the tests of the simulator's Anthropic Messages dialect: one simulator
per test module with small-window models, reset before every test, and an ``anthropic`` client
bound to it (imported ``as`` themselves, as tests/simulator/fixtures.py explains)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from .fixtures import simulator_fixture
from .models import ModelSpec
from .server import Simulator

SAMPLES = Path(__file__).parent.parent / "data" / "claude_code"

SYSTEM = [
    {
        "type": "text",
        "text": "You are a careful agent. " * 40,
        "cache_control": {"type": "ephemeral"},
    }
]
BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
VERSION = {"anthropic-version": "2023-06-01"}


MODELS = {
    "claude-small": ModelSpec(window=300),
    "claude-bytes": ModelSpec(window=100_000, max_body_bytes=2_000),
    "claude-event": ModelSpec(window=300, stream_errors="event"),
}
sim = simulator_fixture(MODELS, ModelSpec(window=200_000), scope="module")


@pytest.fixture(autouse=True)
def reset(sim: Simulator) -> Iterator[None]:
    sim.clear()
    sim.responder = None
    sim.required_api_key = None
    sim.messages_api.count_tokens_enabled = True
    sim.messages_api.require_version = True
    yield


@pytest.fixture(scope="module")
def client(sim: Simulator) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=sim.url, api_key="sk-ant-one", max_retries=0) as c:
        yield c


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def sse(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            name, data = block.split("\n", 1)
            assert name.startswith("event: ") and data.startswith("data: "), block
            events.append((name[7:], json.loads(data[6:])))
    return events


def tool_use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "ls"}}


def tool_result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "a.txt"}
