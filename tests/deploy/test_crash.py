"""ctxgate killed for real (kill -9, SIGTERM) on SQLite and PostgreSQL: the database stays
consistent, a restart serves every session on, takes its crashed predecessor's leases back at
once, and a graceful stop writes out every usage record it still held in memory."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from compression import check_invariants
from tests.serving import (
    MODEL,
    WINDOW,
    ServeProcess,
    check_consistent,
    database_fixture,
    history_over_threshold,
    query,
    write_config,
)
from tests.simulator import Hang, ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

database_url = database_fixture(both=True, file="crash.db", reset=True)
sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)
LEASES = {"lease_ttl_s": 30, "lock_wait_s": 10}


def start(config: Path) -> ServeProcess:
    """A replica; its accounting journals (PostgreSQL's too) beside its config."""
    return ServeProcess(config, cwd=config.parent)


def stopped(replica: ServeProcess) -> str:
    """Stop the replica: its output."""
    replica.stop(15)
    return replica.output()


def is_summary(received: Any) -> bool:
    return bool(received.is_summary)


# -- a lease left by kill -9 ----------------------------------------------------------------


def test_restart_after_kill9_compresses_at_once_despite_the_dead_lease(
    sim: Simulator, database_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, sim.base_url, database_url, storage=LEASES)
    messages = history_over_threshold()
    session = {"X-Session-Id": "crashed-mid-compression"}
    sim.responder = lambda body: Hang(60) if sim.summary_detector(body) else None

    first = start(config)
    client = openai.OpenAI(base_url=first.base_url, api_key="sk-team", max_retries=0)
    stuck = threading.Thread(
        target=lambda: _ignore_errors(
            lambda: client.chat.completions.create(
                model=MODEL, messages=messages, extra_headers=session
            )
        ),
        daemon=True,
    )
    stuck.start()
    sim.wait_for(1, timeout=30, predicate=is_summary)  # compressing: the lease is held
    first.kill()
    assert query(database_url, "SELECT count(*) FROM leases")[0][0] == 1

    sim.responder = None
    second = start(config)
    try:
        client = openai.OpenAI(base_url=second.base_url, api_key="sk-team", max_retries=0)
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers=session
        )
        waited = time.monotonic() - started
    finally:
        assert "Traceback" not in stopped(second)
    assert raw.headers["x-ctxgate-compressed"] == "true"
    assert raw.headers.get("x-ctxgate-outcome") in ("compressed", "fallback")
    assert waited < 5, f"waited {waited:.1f} s for a dead process's lease"
    forwarded = sim.chat_requests[-1].body["messages"]
    assert len(forwarded) < len(messages)
    check_invariants(forwarded)


def _ignore_errors(call: Any) -> None:
    try:
        call()
    except Exception:
        pass


# -- kill -9 under traffic --------------------------------------------------------------------


class Traffic:
    """Sessions that each grow a history turn by turn, until stopped; answers are timed."""

    def __init__(self, base_url: str, sessions: int, histories: dict[str, list[Any]]) -> None:
        self.base_url = base_url
        self.histories = histories
        self.answered: list[float] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(f"crash-{i}", i % 2 == 0), daemon=True)
            for i in range(sessions)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, session: str, stream: bool) -> None:
        # Each session starts just under the window: it is compressed within a turn or two.
        history = self.histories.setdefault(session, history_over_threshold()[:-1])
        with httpx.Client(base_url=self.base_url, timeout=30) as http:
            turn = 0
            while not self._stop.is_set():
                turn += 1
                asked = [*history, {"role": "user", "content": f"step {turn}: " + "data " * 300}]
                body = {"model": MODEL, "messages": asked, "stream": stream}
                try:
                    response = http.post(
                        "/chat/completions", json=body, headers={"x-session-id": session}
                    )
                except httpx.HTTPError:
                    return  # the process is gone
                if response.status_code != 200:
                    return
                self.answered.append(time.monotonic())
                history[:] = [*asked, {"role": "assistant", "content": f"done {turn}"}]


def test_kill9_under_traffic_leaves_a_consistent_database_and_a_working_restart(
    sim: Simulator, database_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, sim.base_url, database_url, storage=LEASES)
    histories: dict[str, list[Any]] = {}
    answered = 0
    sessions = 4
    for run in range(2):
        replica = start(config)  # replays what the killed one before it had not written
        traffic = Traffic(replica.base_url, sessions=sessions, histories=histories)
        traffic.start()
        time.sleep(3.0 + 1.0 * run)
        killed_at = time.monotonic()
        replica.kill()
        traffic.stop()
        check_consistent(database_url)
        rows = query(database_url, "SELECT count(*) FROM usage")[0][0]
        # Records linger up to 0.5 s in memory before their batch is written: until the next
        # start replays its journal, what a kill -9 left out is at most the answers of its
        # last second (linger plus one write). A request cut in the middle of its answer may
        # count (the provider billed it): one per client, per kill.
        settled = answered + sum(1 for t in traffic.answered if t < killed_at - 1.0)
        answered += len(traffic.answered)
        assert settled <= rows <= answered + sessions * (run + 1), (run, settled, rows, answered)
    assert sum(len(h) for h in histories.values()) > 0
    assert sim.summary_requests, "no compression ran: the test did not cover checkpoints"

    last = start(config)
    # Its start replayed the last kill's journal: every answer is accounted.
    assert query(database_url, "SELECT count(*) FROM usage")[0][0] >= answered
    try:
        client = openai.OpenAI(base_url=last.base_url, api_key="sk-team", max_retries=0)
        for session, history in histories.items():
            asked = [*history, {"role": "user", "content": "after the crash"}]
            answer = client.chat.completions.create(
                model=MODEL, messages=asked, extra_headers={"x-session-id": session}
            )
            assert answer.choices[0].message.content
            forwarded = sim.chat_requests[-1].body["messages"]
            assert forwarded[-1] == {"role": "user", "content": "after the crash"}
            check_invariants(forwarded)
    finally:
        assert "Traceback" not in stopped(last)
    check_consistent(database_url)


# -- graceful stop ----------------------------------------------------------------------------


def test_sigterm_writes_out_every_queued_usage_record(
    sim: Simulator, database_url: str, tmp_path: Path
) -> None:
    replica = start(write_config(tmp_path, sim.base_url, database_url, storage=LEASES))
    with httpx.Client(base_url=replica.base_url, timeout=10) as http:
        for i in range(25):
            response = http.post(
                "/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": f"q{i}"}]},
                headers={"x-session-id": f"term-{i % 3}"},
            )
            assert response.status_code == 200
    # At once: the last records are still lingering in memory when the signal arrives.
    assert "Traceback" not in stopped(replica)
    assert query(database_url, "SELECT count(*) FROM usage")[0][0] == 25
    check_consistent(database_url)
