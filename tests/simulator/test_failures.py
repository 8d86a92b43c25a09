"""Tests of the provider simulator's scripted failures: hangs, dropped connections and
mid-stream errors."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from tests.simulator import Disconnect, Hang, Reply, Simulator, StreamError

# Fixtures (fixtures.py says why they are imported "as" themselves).
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import http as http
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.testing import user


def test_hang_times_out_client_without_blocking_others(sim: Simulator) -> None:
    sim.enqueue(Hang(seconds=5))
    errors: list[BaseException] = []

    def hung_call() -> None:
        with openai.OpenAI(base_url=sim.base_url, api_key="k", max_retries=0, timeout=2.0) as c:
            try:
                c.chat.completions.create(model="m", messages=[user("hang")])
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=hung_call)
    thread.start()
    sim.wait_for(1)
    with openai.OpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as c:
        quick = c.chat.completions.create(model="m", messages=[user("quick")])
    # Answered while the other request still hangs, whatever the machine's speed.
    assert thread.is_alive()
    thread.join(5)
    assert quick.choices[0].message.content == "ok: quick"
    assert len(errors) == 1 and isinstance(errors[0], openai.APITimeoutError)
    # the simulator notices the client went away and stops hanging
    sim.wait_for(1, predicate=lambda r: r.outcome == "client_gone", timeout=2)


def test_hang_then_answers(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Hang(seconds=0.2, then=Reply(content="late")))
    t0 = time.monotonic()
    resp = client.chat.completions.create(model="m", messages=[user("x")])
    assert resp.choices[0].message.content == "late"
    assert time.monotonic() - t0 >= 0.2


def test_hang_mid_stream(sim: Simulator, http: httpx.Client) -> None:
    sim.enqueue(
        Hang(seconds=0.25, after_chunks=2, then=Reply(content="one two three four five six"))
    )
    stamps = []
    body = {"model": "m", "stream": True, "messages": [user("x")]}
    with http.stream("POST", "/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                stamps.append(time.monotonic())
    assert stamps[2] - stamps[1] >= 0.2
    assert stamps[-1] - stamps[2] < stamps[2] - stamps[1]  # one pause, not one per chunk


def test_disconnect_stream_sync_sdk_sees_error(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(Disconnect(after_chunks=2))
    seen = 0
    with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError)):
        stream = client.chat.completions.create(
            model="m", messages=[user("a fairly long message to stream back")], stream=True
        )
        for _ in stream:
            seen += 1
    assert seen == 2
    rec = sim.received[-1]
    assert (rec.status, rec.outcome) == (200, "disconnect")


async def test_disconnect_stream_async_sdk_sees_error(sim: Simulator) -> None:
    sim.enqueue(Disconnect(after_chunks=1))
    seen = 0
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError)):
            stream = await client.chat.completions.create(
                model="m", messages=[user("another long enough message")], stream=True
            )
            async for _ in stream:
                seen += 1
    assert seen == 1


def test_disconnect_raw_stream_has_no_done(sim: Simulator, http: httpx.Client) -> None:
    sim.enqueue(Disconnect(after_chunks=3))
    lines = []
    body = {"model": "m", "stream": True, "messages": [user("one two three four five six seven")]}
    with pytest.raises(httpx.RemoteProtocolError):
        with http.stream("POST", "/chat/completions", json=body) as r:
            for line in r.iter_lines():
                lines.append(line)
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert len(data) == 3 and "data: [DONE]" not in data


def test_disconnect_nonstream_closes_without_response(
    sim: Simulator, client: openai.OpenAI, http: httpx.Client
) -> None:
    sim.enqueue(Disconnect())
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[user("x")])
    sim.enqueue(Disconnect())
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        http.post("/chat/completions", json={"model": "m", "messages": [user("x")]})
    assert sim.received[-1].status is None
    # the server is still fine afterwards
    assert (
        client.chat.completions.create(model="m", messages=[user("y")]).choices[0].message.content
        == "ok: y"
    )


def test_stream_error_midstream(sim: Simulator, client: openai.OpenAI) -> None:
    sim.enqueue(StreamError(after_chunks=2, error={"message": "boom", "type": "server_error"}))
    seen = 0
    with pytest.raises(openai.APIError, match="boom"):
        for _ in client.chat.completions.create(model="m", messages=[user("x y z")], stream=True):
            seen += 1
    assert seen == 2
