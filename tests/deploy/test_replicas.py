"""Several ctxgate processes sharing one database: one compression per session, no lost turns."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from compression import check_invariants
from tests.serving import (
    MODEL,
    WINDOW,
    ServeProcess,
    database_fixture,
    history_over_threshold,
    write_config,
)
from tests.simulator import ModelSpec, Simulator

database_url = database_fixture(both=True)


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[tuple[Simulator, list[ServeProcess]]]:
    with Simulator(
        models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True, chunk_delay_s=0.0
    ) as sim:
        path = write_config(tmp_path, sim.base_url, database_url, storage={"lock_wait_s": 30})
        # A PostgreSQL replica keeps its accounting journal under its working directory: the
        # test's own, so that no other test's replica replays it.
        started = [
            ServeProcess(path, log=tmp_path / f"replica-{n}.log", cwd=tmp_path) for n in "ab"
        ]
        try:
            yield sim, started
        finally:
            for replica in started:
                replica.stop(15)
            logs = [replica.output() for replica in started]
            assert not any("Traceback" in log for log in logs), logs


def test_one_session_through_two_replicas_compresses_once(
    replicas: tuple[Simulator, list[ServeProcess]],
) -> None:
    sim, (a, b) = replicas
    session = f"shared-{uuid.uuid4().hex[:8]}"
    messages = history_over_threshold()
    answers: list[Any] = []
    errors: list[BaseException] = []

    def ask(replica: ServeProcess) -> None:
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
