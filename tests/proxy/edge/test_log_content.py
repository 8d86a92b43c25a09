"""What the log holds: no conversation content unless `log_content` is on, whatever the level
and whichever library writes the line; and one line for each compression and each request
answered with an error.

The server runs in this process, so the test's handler, installed the way `ctxgate serve`
installs its own, sees every record: ctxgate's, SQLAlchemy's and the database driver's.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai

from proxy.edge.logs import PlainFormatter, log_through
from session.config.settings import LoggingSettings
from tests.servers import ProxyServer, settings_for
from tests.simulator import Disconnect, Fail, ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

WINDOW = 8192
MODEL = "logs-8k"
MARKER = "Zebra-Quokka-7731"
SECRET_KEY_ID = "AKIAQWERTYUIOPASDFGH"
PASSWORD = "hunter2x9k"

sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)})


def conversation(steps: int = 14) -> list[dict[str, Any]]:
    """A coding session long enough to be compressed at 8K, content planted throughout."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent in /srv/app."},
        {
            "role": "user",
            "content": f"Fix the handlers; the codename is {MARKER}. "
            f"Deploy with DB_PASSWORD={PASSWORD} and key {SECRET_KEY_ID}.",
        },
    ]
    for step in range(steps):
        text = f"module {step} mentions {MARKER} and {SECRET_KEY_ID}: " + " ".join(
            f"handler_{step}_{n} returns process(request, retries={n % 7})" for n in range(60)
        )
        call_id = f"call_{step}"
        arguments = json.dumps({"path": f"src/{MARKER}/m{step}.py"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    return messages


@contextmanager
def captured(settings: LoggingSettings) -> Iterator[io.StringIO]:
    """Every record of the process, through the handler set-up `ctxgate serve` uses."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(PlainFormatter())
    log_through(handler, settings)
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def compressed_session(sim: Simulator, db_path: str, log_content: bool) -> str:
    settings = settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        compression={"background": False},
        logging={"log_content": log_content, "level": "debug"},
    )
    with captured(LoggingSettings(level="debug", log_content=log_content)) as stream:
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-client", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=conversation(),  # type: ignore[arg-type]
            )
    assert raw.headers["x-ctxgate-compressed"] == "true"
    return stream.getvalue()


def test_a_debug_log_of_a_compressed_session_holds_none_of_its_content(
    sim: Simulator, db_path: str
) -> None:
    log = compressed_session(sim, db_path, log_content=False)
    assert "sqlalchemy" in log or "aiosqlite" in log  # the libraries did write at debug
    lowered = log.lower()
    for planted in (MARKER, SECRET_KEY_ID, PASSWORD, "handler_3_17", "m4.py"):
        assert planted.lower() not in lowered, planted
    # What it may say: figures, triggers, session ids.
    assert "compression (" in log and " tokens in " in log


def test_with_content_on_secrets_are_masked_in_every_copy(sim: Simulator, db_path: str) -> None:
    log = compressed_session(sim, db_path, log_content=True)
    assert MARKER in log  # content is on: the conversation is there
    lowered = log.lower()
    for secret in (SECRET_KEY_ID, PASSWORD):
        assert secret.lower() not in lowered, secret
    assert "DB_PASSWORD=[redacted]" in log


def test_each_refusal_and_upstream_error_gets_one_line(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path)
    with captured(LoggingSettings(level="info")) as stream, ProxyServer(settings) as proxy:
        url = proxy.base_url + "/chat/completions"
        bad = httpx.post(url, content=b'{"model": "gpt-4o-mini", "messages": [', timeout=10)
        sim.enqueue(Fail(status=503, body={"error": {"message": "overloaded"}}))
        failed = httpx.post(
            url,
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": MARKER}]},
            timeout=10,
        )
        missing = httpx.get(f"http://127.0.0.1:{proxy.port}/nowhere", timeout=10)
        sim.enqueue(Disconnect(after_chunks=2))
        body = {
            "model": "gpt-4o-mini",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with httpx.stream("POST", url, json=body, timeout=10) as streamed:
            streamed.read()
    assert (bad.status_code, failed.status_code, missing.status_code) == (400, 503, 404)
    lines = stream.getvalue().splitlines()
    refused = [line for line in lines if "ctxgate.requests" in line]
    assert len(refused) == 3, lines
    assert "POST /v1/chat/completions -> 400 invalid_request_error: " in refused[0]
    assert "-> 503 from the upstream, relayed" in refused[1]
    assert "GET /nowhere -> 404 not_found_error" in refused[2]
    broken = [line for line in lines if "stream broke" in line or "without finishing" in line]
    assert len(broken) == 1, lines
    assert MARKER not in stream.getvalue()
