"""Tests of scripting the provider simulator: the behaviour queue, Fail and the responder."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from tests.simulator import Fail, Reply, Simulator

# Fixtures (fixtures.py says why they are imported "as" themselves).
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import http as http
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.testing import user


def test_queue_fifo_then_default(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Reply(content="first"), Reply(content="second"))
    got = [
        client.chat.completions.create(model="m", messages=[user("q")]).choices[0].message.content
        for _ in range(3)
    ]
    assert got == ["first", "second", "ok: q"]


def test_fail_status_body_headers(
    sim: Simulator, client: openai.OpenAI, http: httpx.Client
) -> None:
    body = {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}}
    sim.enqueue(Fail(status=503, body=body, headers={"Retry-After": "7"}))
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=[user("q")])
    assert info.value.status_code == 503
    assert info.value.body == body["error"]
    assert info.value.response.headers["retry-after"] == "7"

    sim.enqueue(Fail(status=400, body=None), Fail(status=429))
    r = http.post("/chat/completions", json={"model": "m", "messages": [user("q")]})
    assert (r.status_code, r.content) == (400, b"")
    r = http.post("/chat/completions", json={"model": "m", "messages": [user("q")], "stream": True})
    assert r.status_code == 429 and r.json()["error"]["type"] == "server_error"


def test_responder_sync_async_and_none(sim: Simulator, client: openai.OpenAI) -> None:
    def responder(body: dict[str, Any]) -> Any:
        text = body["messages"][-1]["content"]
        if text == "fail":
            return Fail(status=418, body={"error": {"message": "teapot"}})
        if text == "str":
            return "plain string"
        return None

    sim.responder = responder
    assert (
        client.chat.completions.create(model="m", messages=[user("str")]).choices[0].message.content
        == "plain string"
    )
    assert (
        client.chat.completions.create(model="m", messages=[user("other")])
        .choices[0]
        .message.content
        == "ok: other"
    )
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=[user("fail")])
    assert info.value.status_code == 418

    async def async_responder(body: dict[str, Any]) -> Reply:
        await asyncio.sleep(0)
        return Reply(content="async " + body["model"])

    sim.responder = async_responder
    sim.enqueue(Reply(content="queued wins"))
    assert (
        client.chat.completions.create(model="m", messages=[user("x")]).choices[0].message.content
        == "queued wins"
    )
    assert (
        client.chat.completions.create(model="m", messages=[user("x")]).choices[0].message.content
        == "async m"
    )

    sim.responder = lambda body: 1 / 0  # a broken responder is a visible 500
    with pytest.raises(openai.InternalServerError, match="ZeroDivisionError"):
        client.chat.completions.create(model="m", messages=[user("x")])


def test_enqueue_rejects_other_objects(sim: Simulator) -> None:
    with pytest.raises(TypeError):
        sim.enqueue("not a behaviour")  # type: ignore[arg-type]
