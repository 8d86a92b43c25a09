"""Tests of the provider simulator's lifecycle: the API key, a prompt stop(), no leaked threads
or ports, and the standalone module."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.simulator import Hang, ModelSpec, Simulator
from tests.simulator.testing import long_text, user


def test_required_api_key() -> None:
    with Simulator(required_api_key="sk-right") as sim:
        with openai.OpenAI(base_url=sim.base_url, api_key="sk-wrong-key-123", max_retries=0) as c:
            with pytest.raises(openai.AuthenticationError) as info:
                c.chat.completions.create(model="m", messages=[user("x")])
            assert info.value.code == "invalid_api_key"
            assert "sk-wrong-key-123" not in str(info.value)
        with openai.OpenAI(base_url=sim.base_url, api_key="sk-right", max_retries=0) as c:
            assert (
                c.chat.completions.create(model="m", messages=[user("x")])
                .choices[0]
                .message.content
                == "ok: x"
            )
        assert sim.received[0].headers["authorization"] == "Bearer sk-wrong-key-123"


def test_stop_is_prompt_even_with_a_hung_request() -> None:
    sim = Simulator().start()
    sim.enqueue(Hang(seconds=60))
    errors: list[BaseException] = []

    def call() -> None:
        with openai.OpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as c:
            try:
                c.chat.completions.create(model="m", messages=[user("x")])
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    sim.wait_for(1)
    t0 = time.monotonic()
    sim.stop()
    assert time.monotonic() - t0 < 15  # not the hang's 60 s
    thread.join(5)
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    sim.stop()  # idempotent


def test_twenty_simulators_leak_no_threads_or_ports() -> None:
    Simulator().start().stop()  # warm-up (tokenizer load)
    before = threading.active_count()
    ports = []
    t0 = time.monotonic()
    with httpx.Client(timeout=2) as http:
        for _ in range(20):
            with Simulator(models={"m": ModelSpec(window=100)}) as sim:
                ports.append(sim.port)
                r = http.post(
                    sim.base_url + "/chat/completions",
                    json={"model": "m", "messages": [user("hi")]},
                )
                assert r.status_code == 200
        assert time.monotonic() - t0 < 15  # no stop waits out a grace period
        assert threading.active_count() == before
        for port in ports:
            with pytest.raises(httpx.ConnectError):
                http.get(f"http://127.0.0.1:{port}/v1/models")


def test_standalone_module_runs() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.simulator",
            "--port",
            str(port),
            "--window",
            "8192",
            "--model",
            "tiny=50:llamacpp",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert f"http://127.0.0.1:{port}/v1" in line
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["tiny"]
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "tiny", "messages": [user(long_text(60))]},
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0


def test_without_a_log_it_answers_and_keeps_nothing() -> None:
    seen: list[int | None] = []
    with Simulator(keep_log=False) as sim:
        sim.on_request = lambda rec: seen.append(rec.prompt_tokens)
        with openai.OpenAI(base_url=sim.base_url, api_key="k", max_retries=0) as c:
            for text in ("one", "two"):
                answer = c.chat.completions.create(model="m", messages=[user(text)])
                assert answer.choices[0].message.content == f"ok: {text}"
        assert sim.received == []
    assert len(seen) == 2 and all(tokens for tokens in seen)


def _idle_connection(sim: Simulator) -> socket.socket:
    """A connection that has had one answer, read to its last byte, and now sits idle: what
    it yields next is the keep-alive's doing, not the rest of the answer."""
    host, port = sim.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", "/health")
    answer = conn.getresponse()
    assert answer.status == 200
    answer.read()
    assert conn.sock is not None
    return conn.sock


def test_an_idle_connection_is_closed_after_keep_alive_s() -> None:
    # Shown by order rather than by a wall-clock bound, which a loaded machine overruns: the
    # short keep-alive's connection closes, not before its time, while the long one's is open.
    with Simulator(keep_alive_s=1) as short, Simulator(keep_alive_s=30) as long:
        with _idle_connection(long) as kept, _idle_connection(short) as dropped:
            t0 = time.monotonic()
            dropped.settimeout(20)
            assert dropped.recv(1) == b""
            # Its timer started when the answer went out, a moment before t0.
            assert time.monotonic() - t0 >= 0.5
            kept.settimeout(0.2)
            with pytest.raises(TimeoutError):
                kept.recv(1)
