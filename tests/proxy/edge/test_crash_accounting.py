"""kill -9 of one of two workers under a steady load: every request answered before the kill is
accounted (usage rows, sessions.request_count, charges), once, after the replacement worker
has replayed the dead one's journals.

Real processes: `ctxgate serve --workers 2`, the provider simulator, a load of 50 requests/s
on fresh connections (the kernel spreads them over both workers) plus one connection pinned
to the victim, which is killed 150 ms after that connection's latest answer: without a
journal, the write-behind's half-second linger holds that request (and the others of the
last half second) when the process dies.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.serving import (
    MODEL,
    WINDOW,
    ServeProcess,
    chat,
    database_fixture,
    query,
    workers_fixture,
    write_config,
)
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

RATE = 50.0  # requests per second
BEFORE_KILL_S = 2.0
AFTER_KILL_S = 1.0
LAST_S = 0.1  # what may go unaccounted: the answers of the last 100 ms before the kill
KEPT = {"retention": {"session_idle_days": 0}}

sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, chunk_delay_s=0.0)
db_url = database_fixture(both=True)
# The working directory holds PostgreSQL's journals (storage.replay.journal_directory).
served = workers_fixture(journals_here=True, clean=False, storage=KEPT)


@dataclass(frozen=True, slots=True)
class Answer:
    session: str
    at: float  # monotonic time the client had the whole answer


class Load:
    """Requests at a steady rate, each on a fresh connection, answers timed."""

    def __init__(self, root: str, prefix: str) -> None:
        self.base_url = f"{root}/v1"
        self.prefix = prefix
        self.answers: list[Answer] = []
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(32)
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        started = time.monotonic()
        n = 0
        while not self._stop.is_set():
            self._pool.submit(self.one, f"{self.prefix}-{n}", f"q{n}")
            n += 1
            time.sleep(max(0.0, started + n / RATE - time.monotonic()))

    def one(self, session: str, content: str, http: httpx.Client | None = None) -> Answer | None:
        messages = [{"role": "user", "content": content}]
        try:
            if http is None:
                with httpx.Client(timeout=30) as fresh:
                    answer = chat(fresh, self.base_url, messages, session)
            else:
                answer = chat(http, self.base_url, messages, session)
            answer.parse()  # the whole body
            ok = answer.http_response.status_code == 200
        except Exception:  # a connection the kill cut: not answered
            ok = False
        with self._lock:
            if not ok:
                self.failed += 1
                return None
            done = Answer(session, time.monotonic())
            self.answers.append(done)
            return done


def accounted(url: str, prefix: str) -> dict[str, dict[str, int]]:
    """Per table, how many times each session (one request each) is counted."""
    like = f"'{prefix}-%'"
    usage = query(
        url,
        "SELECT sessions.key, count(*) FROM usage JOIN sessions ON sessions.id = "
        f"usage.session_id WHERE sessions.key LIKE {like} GROUP BY sessions.key",
    )
    counts = query(url, f"SELECT key, request_count FROM sessions WHERE key LIKE {like}")
    charges = query(
        url,
        f"SELECT key, count(*) FROM charges WHERE kind = 'request' AND key LIKE {like} "
        "GROUP BY key",
    )
    return {
        what: {str(key): int(count) for key, count in rows}
        for what, rows in (("usage", usage), ("request_count", counts), ("charges", charges))
    }


def test_kill9_of_a_worker_under_load_loses_no_accounting(
    served: ServeProcess, sim: Simulator, db_url: str, tmp_path: Path
) -> None:
    prefix = f"crash-{uuid.uuid4().hex[:8]}"  # PostgreSQL's database is shared
    victim = min(served.pids)
    load = Load(served.root, prefix)
    load.start()
    time.sleep(BEFORE_KILL_S)
    with closing(served.pinned(victim)) as http:
        last = load.one(f"{prefix}-pinned", "the victim's last answer", http)
    assert last is not None
    time.sleep(0.15)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    time.sleep(AFTER_KILL_S)
    load.stop()

    deadline = time.monotonic() + 60
    while victim in served.wait_for_pids(2):  # its replacement replays its journals
        assert time.monotonic() < deadline, "the killed worker was not replaced"
        time.sleep(0.2)
    assert served.stop() == 0, served.output()
    assert "Traceback" not in served.output(), served.output()

    answered = {a.session: a.at for a in load.answers}
    found = accounted(db_url, prefix)
    lost = {what: sorted(set(answered) - set(counts)) for what, counts in found.items()}
    before_kill = {what: [killed_at - answered[s] for s in gone] for what, gone in lost.items()}
    print(
        f"answered {len(answered)}, cut by the kill {load.failed}, "
        f"accounted { {w: len(c) for w, c in found.items()} }, "
        f"lost (seconds answered before the kill) {before_kill}"
    )
    assert len(answered) >= RATE * (BEFORE_KILL_S + AFTER_KILL_S) * 0.8
    for what, counts in found.items():
        # Nothing answered earlier than the last 100 ms before the kill is missing ...
        assert all(ago <= LAST_S for ago in before_kill[what]), (what, before_kill[what])
        # ... nothing is counted twice, and nothing the clients were not sent (a request cut
        # mid-answer may count, unanswered).
        assert set(counts.values()) <= {1}, (what, counts)
        assert len(counts) <= len(answered) + load.failed
    if db_url.startswith("sqlite"):
        journals = Path(f"{tmp_path}/shared.db.accounting")
    else:
        journals = tmp_path / "ctxgate-accounting"
    assert not list(journals.rglob("*.log")), "the journals were not replayed and removed"


def test_a_replica_killed_and_started_again_accounts_every_answer(
    sim: Simulator, db_url: str, tmp_path: Path
) -> None:
    """One process per replica (as behind HAProxy): the killed replica's own next start
    replays what it had not written, however soon after its answers it died."""
    prefix = f"replica-{uuid.uuid4().hex[:8]}"
    path = write_config(tmp_path, sim.base_url, db_url, storage=KEPT)
    replica = ServeProcess(path, log=tmp_path / "first.log", workers=1, cwd=tmp_path)
    load = Load(replica.root, prefix)
    with httpx.Client(timeout=30) as http:
        for n in range(15):
            assert load.one(f"{prefix}-{n}", f"q{n}", http) is not None
    # The answer goes out before its bookkeeping runs: what may be lost is the last 100 ms
    # of answers, so the kill comes that long after the last one (every answer is still
    # queued in the write-behind then: its linger is 0.5 s).
    time.sleep(LAST_S)
    replica.kill()

    again = ServeProcess(path, log=tmp_path / "second.log", workers=1, cwd=tmp_path)
    # uvicorn ends a lone server stopped by SIGTERM with the signal, once it has shut down.
    assert again.stop() in (0, -signal.SIGTERM), again.output()
    assert "Traceback" not in again.output(), again.output()
    found = accounted(db_url, prefix)
    assert {what: len(counts) for what, counts in found.items()} == {
        "usage": 15,
        "request_count": 15,
        "charges": 15,
    }
    assert all(set(counts.values()) == {1} for counts in found.values())
