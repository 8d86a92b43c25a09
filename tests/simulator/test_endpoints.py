"""Tests of the provider simulator's request validation and its non-chat endpoints."""

from __future__ import annotations

import httpx
import openai

from tests.simulator import Reply, Simulator

# Fixtures (fixtures.py says why they are imported "as" themselves).
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import http as http
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.testing import MODELS, user


def test_tool_pairing_problems_recorded_and_optionally_rejected(
    sim: Simulator, http: httpx.Client
) -> None:
    body = {
        "model": "m",
        "messages": [
            user("x"),
            {"role": "tool", "tool_call_id": "nope", "content": "orphan"},
        ],
    }
    assert http.post("/chat/completions", json=body).status_code == 200
    assert len(sim.received[-1].problems) == 1

    sim.validate_messages = True
    r = http.post("/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": (
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                "message with 'tool_calls'."
            ),
            "type": "invalid_request_error",
            "param": "messages.[1].role",
            "code": None,
        }
    }
    unanswered = {
        "model": "m",
        "messages": [
            user("x"),
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            user("y"),
        ],
    }
    r = http.post("/chat/completions", json=unanswered)
    assert r.status_code == 400
    assert r.json()["error"]["message"].endswith(
        "The following tool_call_ids did not have response messages: call_a"
    )
    assert r.json()["error"]["param"] == "messages.[1].role"


def test_bad_requests(http: httpx.Client) -> None:
    r = http.post(
        "/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = http.post("/chat/completions", json={"model": "m"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert http.get("/nothing-here").status_code == 404


def test_models_endpoint(sim: Simulator, client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == list(MODELS)
    assert client.models.retrieve("small-vllm").id == "small-vllm"
    assert sim.received[0].method == "GET" and sim.received[0].path == "/v1/models"


def test_clear_forgets_log_and_queue(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Reply(content="a"))
    client.models.list()
    sim.clear()
    assert sim.received == [] and sim.queued == 0
