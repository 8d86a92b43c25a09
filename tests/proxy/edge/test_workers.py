"""`ctxgate serve --workers 2` for real: a supervisor process and two spawned workers on one
port, in front of the simulator, sharing one SQLite file.

A client's keep-alive connection stays with the worker that accepted it, and `/healthz` names
that worker's pid, so a test can tell which worker served a request and can pin a client to a
worker of its choice. A draining server finishes what it has and refuses new connections.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from compression import check_invariants
from proxy.config_file import SettingsError, parse_settings, worker_count
from proxy.edge.cli import main
from tests.serving import (
    MODEL,
    WINDOW,
    ServeProcess,
    chat,
    check_consistent,
    database_fixture,
    history_over_threshold,
    parent_of,
    query,
    worker_of,
    workers_fixture,
    write_config,
)
from tests.simulator import Hang, ModelSpec, Reply, Simulator
from tests.simulator.fixtures import simulator_fixture

sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, validate_messages=True, chunk_delay_s=0.0
)
db_url = database_fixture()
served = workers_fixture(storage={"lock_wait_s": 30})


def test_requests_are_served_by_both_workers_and_metrics_count_them_all(
    served: ServeProcess, sim: Simulator
) -> None:
    supervisor = served.process.pid
    assert len(served.pids) == 2 and supervisor not in served.pids
    assert {parent_of(pid) for pid in served.pids} == {supervisor}

    served_by: list[int] = []
    for i in range(24):
        with httpx.Client() as http:  # a fresh connection: the kernel picks its worker
            pid = worker_of(http, served.root)
            answer = chat(http, served.base_url, [{"role": "user", "content": f"q{i}"}], f"s{i}")
            assert answer.http_response.status_code == 200
            assert worker_of(http, served.root) == pid  # the same connection, the same worker
            served_by.append(pid)

    assert set(served_by) == served.pids, served_by
    assert len(sim.chat_requests) == 24
    # Each scrape is answered by one worker, and each reports what both served.
    for _ in range(4):
        assert served.requests_counted() == 24


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_one_session_through_both_workers_compresses_once(
    served: ServeProcess, sim: Simulator, db_url: str
) -> None:
    a, b = (served.pinned(pid) for pid in sorted(served.pids))
    session = f"across-workers-{uuid.uuid4().hex[:8]}"  # PostgreSQL's database is shared
    messages = history_over_threshold()
    answers: list[Any] = []
    errors: list[BaseException] = []

    def ask(http: httpx.Client) -> None:
        try:
            answers.append(chat(http, served.base_url, messages, session))
        except BaseException as exc:
            errors.append(exc)

    # Both workers receive the session's first over-threshold request at the same time.
    threads = [threading.Thread(target=ask, args=(http,)) for http in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert len(sim.summary_requests) == 1, "both workers compressed the same session"
    checkpoints = {answer.headers.get("x-ctxgate-checkpoint") for answer in answers}
    assert len(checkpoints) == 1 and None not in checkpoints

    # The conversation goes on, alternating workers: each turn builds on the shared checkpoint.
    for turn, http in enumerate([a, b, a, b]):
        pid = worker_of(http, served.root)
        reply = answers[-1].parse().choices[0].message
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": f"Follow-up {turn}."})
        ask(http)
        assert errors == []
        assert worker_of(http, served.root) == pid
        assert answers[-1].headers.get("x-ctxgate-checkpoint") in checkpoints
        forwarded = sim.chat_requests[-1].body["messages"]
        check_invariants(forwarded)
        assert forwarded[-1] == {"role": "user", "content": f"Follow-up {turn}."}
        assert len(forwarded) < len(messages)
    assert len(sim.summary_requests) == 1
    a.close()
    b.close()

    served.stop()  # the workers write out the usage they hold
    rows = query(db_url, "SELECT key, request_count FROM sessions")
    assert [count for key, count in rows if session in key] == [6]
    if db_url.startswith("sqlite"):  # this test's own file: every row in it is this test's
        check_consistent(db_url)  # usage rows match the counters; every checkpoint is valid


class InFlight:
    """One request held upstream for `seconds` before its answer, asked from a thread of its
    own on a connection of its own; returns once the upstream holds it."""

    def __init__(self, served: ServeProcess, sim: Simulator, seconds: float) -> None:
        sim.enqueue(Hang(seconds=seconds, then=Reply(content="the slow answer")))
        self.http = httpx.Client(timeout=60)
        self.answer: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._ask, args=(served.base_url,))
        self.thread.start()
        sim.wait_for(1, timeout=30)

    def _ask(self, base_url: str) -> None:
        messages = [{"role": "user", "content": "take your time"}]
        try:
            self.answer = chat(self.http, base_url, messages, "slow")
        except BaseException as exc:
            self.error = exc

    def finished(self) -> str:
        """The answer's text, once it came whole (a failure raises)."""
        self.thread.join(60)
        self.http.close()
        assert self.error is None, self.error
        assert self.answer.http_response.status_code == 200
        text: str = self.answer.parse().choices[0].message.content
        return text


def test_sigterm_lets_the_request_in_flight_finish(served: ServeProcess, sim: Simulator) -> None:
    slow = InFlight(served, sim, seconds=2.0)
    stopped_at = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    assert slow.finished() == "the slow answer"
    assert served.stop() == 0
    assert time.monotonic() - stopped_at < 15
    # Stopped: nobody listens on the port any more.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{served.root}/healthz", timeout=2)


def _refused(port: int) -> bool:
    """Whether a new connection to `port` is refused (True) or accepted (False)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


def test_a_draining_server_refuses_new_connections_at_once(
    served: ServeProcess, sim: Simulator
) -> None:
    """While a request in flight finishes, a new connection is refused at once (a balancer's
    health check then fails fast instead of waiting on a socket nobody accepts from)."""
    slow = InFlight(served, sim, seconds=5.0)
    assert not _refused(served.port)
    served.process.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    refused_after: float | None = None
    while time.monotonic() - stopped_at < 2.0:
        if _refused(served.port):
            refused_after = time.monotonic() - stopped_at
            break
        time.sleep(0.05)
    draining = slow.thread.is_alive()
    answer = slow.finished()  # the request in flight still finished
    assert refused_after is not None, "new connections were still accepted 2 s into the drain"
    print(f"\nnew connections refused {refused_after:.2f}s into the drain")
    assert draining, "the drain was over before the check: it proves nothing"
    assert answer == "the slow answer"
    assert served.stop() == 0


def test_a_worker_that_dies_is_replaced_and_its_counts_kept(
    served: ServeProcess, sim: Simulator
) -> None:
    victim = min(served.pids)
    with closing(served.pinned(victim)) as http:
        for i in range(3):
            chat(http, served.base_url, [{"role": "user", "content": f"q{i}"}], "before")
    # Counted once the client has its answer (bookkeeping runs after it): wait for the count.
    deadline = time.monotonic() + 10
    while served.requests_counted() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(victim, signal.SIGKILL)

    deadline = time.monotonic() + 60
    while True:  # fresh connections until both slots answer again, one of them a new process
        pids = served.wait_for_pids(2)
        if victim not in pids:
            break
        assert time.monotonic() < deadline, "the killed worker was not replaced"
        time.sleep(0.2)
    assert pids & served.pids == served.pids - {victim}
    assert {parent_of(pid) for pid in pids} == {served.process.pid}

    replacement = (pids - served.pids).pop()
    with closing(served.pinned(replacement)) as http:
        for i in range(2):
            answer = chat(http, served.base_url, [{"role": "user", "content": f"r{i}"}], "after")
            assert answer.http_response.status_code == 200
    assert served.requests_counted() == 5  # the dead worker's 3 are still counted
    assert "exited with status -9" in served.output()


def test_a_worker_that_cannot_start_stops_the_server(sim: Simulator, tmp_path: Path) -> None:
    # Nothing listens on port 1: the workers' start-up cannot open the database.
    path = write_config(
        tmp_path, sim.base_url, "postgresql+asyncpg://ctxgate:x@127.0.0.1:1/ctxgate"
    )
    served = ServeProcess(path, log=tmp_path / "ctxgate.log", workers=2, wait=False)
    assert served.process.wait(90) == 3, served.output()
    assert "failed to start; stopping ctxgate" in served.output()


def test_one_worker_is_one_process_without_a_supervisor(sim: Simulator, tmp_path: Path) -> None:
    path = write_config(
        tmp_path, sim.base_url, f"sqlite+aiosqlite:///{tmp_path}/one.db", server={"workers": 1}
    )
    served = ServeProcess(path, log=tmp_path / "ctxgate.log")
    try:
        assert served.pids == {served.process.pid}
        metrics = httpx.get(f"{served.root}/metrics").text
        assert "ctxgate_active_sessions " in metrics and "_created" in metrics  # in memory
    finally:
        served.stop(30)


def test_worker_counts_from_the_config_and_the_command_line() -> None:
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    assert worker_count(3) == 3 and worker_count("2") == 2
    for bad in (0, -1, "0", "many"):
        with pytest.raises(SettingsError, match="server.workers: must be a positive integer"):
            worker_count(bad)
    document = {
        "upstreams": {"sim": {"base_url": "http://127.0.0.1:9/v1"}},
        "models": [{"match": "*", "upstream": "sim"}],
        "server": {"workers": "auto"},
    }
    assert parse_settings(document, {}).server.workers == len(os.sched_getaffinity(0))
    document["server"] = {"workers": True}
    with pytest.raises(SettingsError, match="server.workers"):
        parse_settings(document, {})


def test_serve_refuses_a_bad_worker_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workers", "none"]) == 2
    assert "--workers: must be a positive integer or auto, got 'none'" in capsys.readouterr().err
