"""`ctxgate serve --workers 2` for real: a supervisor process and two spawned workers on one
port, in front of the simulator, sharing one SQLite file.

A client's keep-alive connection stays with the worker that accepted it, and `/healthz` names
that worker's pid, so a test can tell which worker served a request and can pin a client to a
worker of its choice.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from compression import check_invariants
from proxy.config_file import SettingsError, parse_settings, worker_count
from proxy.edge.cli import main
from tests.deploy.test_crash import check_consistent, query
from tests.deploy.test_replicas import MODEL, PG_ENV, WINDOW, history_over_threshold
from tests.servers import free_port
from tests.simulator import Hang, ModelSpec, Reply, Simulator
from tests.simulator.fixtures import simulator_fixture


class Workers:
    """`ctxgate serve --workers N` in its own process (the supervisor)."""

    def __init__(self, config: Path, log: Path, workers: int = 2, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"
        self.log = log
        argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(config)]
        argv += ["--port", str(self.port), "--workers", str(workers)]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=_importable()
            )
        try:
            self.pids = self.wait_for_pids(workers)
        except BaseException:
            self.process.kill()  # its workers follow it within a second
            self.process.wait()
            raise

    def wait_for_pids(self, count: int, timeout: float = 60) -> set[int]:
        """The pids of `count` workers answering, each found on a fresh connection."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start: {self.log.read_text()}")
            try:
                with httpx.Client(timeout=5) as http:
                    seen.add(http.get(f"{self.root}/healthz").json()["pid"])
            except httpx.HTTPError:
                time.sleep(0.1)
        return seen

    def pinned(self, pid: int) -> httpx.Client:
        """A client whose one connection was accepted by worker `pid`."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            http = httpx.Client(limits=httpx.Limits(max_connections=1), timeout=60)
            if worker_of(http, self.root) == pid:
                return http
            http.close()
        raise AssertionError(f"no connection reached worker {pid}")

    def requests_counted(self) -> float:
        """`ctxgate_requests_total` summed over its status labels, as /metrics reports it."""
        with httpx.Client() as http:
            text = http.get(f"{self.root}/metrics").text
        counts = re.findall(r"^ctxgate_requests_total\{[^}]*\} (\S+)$", text, re.M)
        return sum(float(c) for c in counts)

    def stop(self, timeout: float = 40) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _importable() -> dict[str, str]:
    """The environment, with this checkout importable from another working directory."""
    root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH", "")
    return os.environ | {"PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root}


def worker_of(http: httpx.Client, root: str) -> int:
    pid: int = http.get(f"{root}/healthz").json()["pid"]
    return pid


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, validate_messages=True, chunk_delay_s=0.0
)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if getattr(request, "param", "sqlite") == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/shared.db"
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    return url


@pytest.fixture
def served(sim: Simulator, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    config = {
        "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-up"}},
        "models": [{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        "storage": {"url": db_url, "lock_wait_s": 30},
        "compression": {"background": False},
        "logging": {"level": "warning", "json": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    workers = Workers(path, tmp_path / "ctxgate.log")
    try:
        yield workers
    finally:
        code = workers.stop()
        assert "Traceback" not in workers.output(), workers.output()
        assert code == 0, workers.output()


def chat(http: httpx.Client, base_url: str, messages: list[dict[str, Any]], session: str) -> Any:
    client = openai.OpenAI(base_url=base_url, api_key="sk-team", max_retries=0, http_client=http)
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers={"X-Session-Id": session}
    )  # type: ignore[arg-type]


def test_requests_are_served_by_both_workers_and_metrics_count_them_all(
    served: Workers, sim: Simulator
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
    served: Workers, sim: Simulator, db_url: str
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


def test_sigterm_lets_the_request_in_flight_finish(served: Workers, sim: Simulator) -> None:
    sim.enqueue(Hang(seconds=2.0, then=Reply(content="the slow answer")))
    http = httpx.Client(timeout=60)
    result: dict[str, Any] = {}

    def ask() -> None:
        try:
            result["answer"] = chat(
                http, served.base_url, [{"role": "user", "content": "take your time"}], "slow"
            )
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=ask)
    thread.start()
    sim.wait_for(1, timeout=30)  # the request is upstream, held there for 2 s
    stopped_at = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    thread.join(60)
    http.close()
    assert "error" not in result, result
    answer = result["answer"]
    assert answer.http_response.status_code == 200
    assert answer.parse().choices[0].message.content == "the slow answer"
    assert served.stop() == 0
    assert time.monotonic() - stopped_at < 15
    # Stopped: nobody listens on the port any more.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{served.root}/healthz", timeout=2)


def test_a_worker_that_dies_is_replaced_and_its_counts_kept(
    served: Workers, sim: Simulator
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
    config = {
        "upstreams": {"sim": {"base_url": sim.base_url}},
        "models": [{"match": "*", "upstream": "sim"}],
        # Nothing listens on port 1: the workers' start-up cannot open the database.
        "storage": {"url": "postgresql+asyncpg://ctxgate:x@127.0.0.1:1/ctxgate"},
        "logging": {"level": "warning", "json": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(path)]
    argv += ["--port", str(free_port()), "--workers", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 3, done.stderr
    assert "failed to start; stopping ctxgate" in done.stderr


def test_one_worker_is_one_process_without_a_supervisor(sim: Simulator, tmp_path: Path) -> None:
    config = {
        "upstreams": {"sim": {"base_url": sim.base_url, "api_key": "sk-up"}},
        "models": [{"match": "*", "upstream": "sim"}],
        "storage": {"url": f"sqlite+aiosqlite:///{tmp_path}/one.db"},
        "server": {"workers": 1},
        "logging": {"level": "warning", "json": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--config", str(path)]
    process = subprocess.Popen([*argv, "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                pid = httpx.get(f"http://127.0.0.1:{port}/healthz").json()["pid"]
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert pid == process.pid
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "ctxgate_active_sessions " in metrics and "_created" in metrics  # in memory
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


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
