"""Several ctxgate processes sharing one database: one compression per session, no lost turns."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from compression import check_invariants
from compression.counting.tokens import counter_for_model
from tests.servers import free_port
from tests.simulator import ModelSpec, Simulator

WINDOW = 8192
MODEL = "agent-8k"
PG_ENV = "CTXGATE_TEST_PG_URL"


class Replica:
    """`ctxgate serve` in its own process."""

    def __init__(self, config: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy.edge.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # A PostgreSQL replica keeps its accounting journal under its working directory:
            # the test's own, so that no other test's replica replays it.
            cwd=config.parent,
        )
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replica did not start: {self.process.stderr.read()}")  # type: ignore[union-attr]
            time.sleep(0.1)

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/shared.db"
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    return url


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[tuple[Simulator, list[Replica]]]:
    with Simulator(
        models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True, chunk_delay_s=0.0
    ) as sim:
        config = {
            "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-up"}},
            "models": [{"match": "*", "upstream": "sim", "context_length": WINDOW}],
            "storage": {"url": database_url, "lock_wait_s": 30},
            "compression": {"background": False},
            "logging": {"level": "warning", "json": False},
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        started = [Replica(path), Replica(path)]
        try:
            yield sim, started
        finally:
            logs = [replica.stop() for replica in started]
            assert not any("Traceback" in log for log in logs), logs


def history_over_threshold() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Constraint: never touch vendor/. Fix the build."},
    ]
    counter = counter_for_model("gpt-4o")
    i = 0
    while counter.count_messages(messages) < 0.9 * WINDOW:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": f'{{"path": "src/m{i}.py"}}',
                        },
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"# module {i}\n" + "value = compute(x)\n" * 120,
            }
        )
        i += 1
    messages.append({"role": "user", "content": "Now run the tests."})
    return messages


def test_one_session_through_two_replicas_compresses_once(
    replicas: tuple[Simulator, list[Replica]],
) -> None:
    sim, (a, b) = replicas
    session = f"shared-{uuid.uuid4().hex[:8]}"
    messages = history_over_threshold()
    answers: list[Any] = []
    errors: list[BaseException] = []

    def ask(replica: Replica) -> None:
        client = openai.OpenAI(base_url=replica.base_url, api_key="sk-team", max_retries=0)
        try:
            answers.append(
                client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=messages, extra_headers={"X-Session-Id": session}
                )
            )  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(r,)) for r in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(sim.summary_requests) == 1, "both replicas compressed the same session"
    checkpoints = {answer.headers.get("x-ctxgate-checkpoint") for answer in answers}
    assert len(checkpoints) == 1 and None not in checkpoints

    # The conversation goes on, alternating replicas: each turn uses the shared checkpoint.
    for turn, replica in enumerate([a, b, a, b]):
        reply = answers[-1].parse().choices[0].message
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": f"Follow-up {turn}."})
        ask(replica)
        assert errors == []
        forwarded = sim.chat_requests[-1].body["messages"]
        check_invariants(forwarded)
        assert forwarded[-1] == {"role": "user", "content": f"Follow-up {turn}."}
        assert len(forwarded) < len(messages)
    assert len(sim.summary_requests) == 1
