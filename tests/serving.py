"""`ctxgate serve` in a process of its own, for the tests about processes: workers, replicas,
kill -9, draining, start-up without a config file.

    path = write_config(tmp_path, sim.base_url, db_url)
    served = ServeProcess(path, workers=2)  # waits for both
    ...
    assert served.stop() == 0 and "Traceback" not in served.output()

`workers_fixture` and `database_fixture` make the fixtures these tests share; `query` and
`check_consistent` read what the processes left in the database. The model and window are the
ones every such test's simulator serves.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from sqlalchemy import text

from compression import check_invariants
from compression.counting.tokens import counter_for_model
from storage.database.db import Database
from tests.servers import free_port
from tests.simulator import Simulator
from tests.storage.factories import PG_ENV, reset_postgres

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 8192
MODEL = "agent-8k"


class ServeProcess:
    """`ctxgate serve` in its own process. With `config`, that file (else the zero-config
    settings from `env`); with `workers`, `--workers N` (a supervisor and N worker processes;
    1 is one process without a supervisor). Its output goes to `log` (by default a file of
    its own beside the config, or in `cwd`). Returns once `workers` (or one) answer;
    `wait=False` returns at once."""

    def __init__(
        self,
        config: Path | None = None,
        *,
        log: Path | None = None,
        workers: int | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        wait: bool = True,
    ) -> None:
        self.port = port or free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"
        if log is None:
            folder = cwd or (config.parent if config is not None else None)
            assert folder is not None, "a log, a config or a working directory"
            log = folder / f"ctxgate-{self.port}.log"
        self.log = log
        argv = [sys.executable, "-m", "proxy.edge.cli", "serve", "--port", str(self.port)]
        if config is not None:
            argv += ["--config", str(config)]
        if workers is not None:
            argv += ["--workers", str(workers)]
        environ = importable(os.environ if env is None else env)
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=environ
            )
        self.pids: set[int] = set()
        if wait:
            try:
                self.pids = self.wait_for_pids(workers or 1)
            except BaseException:
                self.kill()  # a supervisor's workers follow it within a second
                raise

    def wait_for_pids(self, count: int, timeout: float = 60) -> set[int]:
        """The pids of `count` processes answering, each found on a fresh connection."""
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ctxgate serve did not start: {self.output()}")
            try:
                with httpx.Client(timeout=5) as http:
                    seen.add(worker_of(http, self.root))
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
            body = http.get(f"{self.root}/metrics").text
        counts = re.findall(r"^ctxgate_requests_total\{[^}]*\} (\S+)$", body, re.M)
        return sum(float(c) for c in counts)

    def stop(self, timeout: float = 40) -> int:
        """SIGTERM, and its exit status once it has shut down (killed, and raised, if it
        outlives `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.process.kill()
        self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def importable(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ`, with this checkout importable from another working directory."""
    path = environ.get("PYTHONPATH", "")
    return {**environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def worker_of(http: httpx.Client, root: str) -> int:
    """The pid of the process that accepted `http`'s connection."""
    pid: int = http.get(f"{root}/healthz").json()["pid"]
    return pid


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def chat(http: httpx.Client, base_url: str, messages: list[dict[str, Any]], session: str) -> Any:
    """One chat request of `session` through the official SDK on `http`, raw."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-team", max_retries=0, http_client=http)
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers={"X-Session-Id": session}
    )  # type: ignore[arg-type]


# -- configuration and fixtures ---------------------------------------------------------------


def write_config(directory: Path, upstream: str, url: str, **sections: Any) -> Path:
    """`config.yaml` in `directory`: every model to `upstream` with the test window, the
    database at `url`, compression on arrival, warnings only; `sections` replace whole
    sections, except `storage`, whose keys are added to the url."""
    config: dict[str, Any] = {
        "upstreams": {"sim": {"base_url": upstream, "api_key": "sk-up"}},
        "models": [{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        "compression": {"background": False},
        "logging": {"level": "warning", "json": False},
    }
    config |= sections
    config["storage"] = {"url": url, **sections.get("storage", {})}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def database_url(kind: str, directory: Path, file: str = "shared.db") -> str:
    """A SQLite file in `directory`, or the PostgreSQL test server (skipped without one)."""
    if kind == "sqlite":
        return f"sqlite+aiosqlite:///{directory}/{file}"
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    return url


BOTH = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def database_fixture(*, both: bool = False, file: str = "shared.db", reset: bool = False) -> Any:
    """A fixture for a database url: SQLite unless parametrized (indirectly) with
    "postgres"; with `both`, every test runs on each. `reset` empties PostgreSQL's schema
    first (its database is shared: only for tests no other test runs beside)."""

    @pytest.fixture(params=BOTH if both else None)
    def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
        chosen = database_url(getattr(request, "param", "sqlite"), tmp_path, file)
        if reset and not chosen.startswith("sqlite"):
            asyncio.run(reset_postgres(chosen))
        return chosen

    return url


def workers_fixture(*, journals_here: bool = False, clean: bool = True, **sections: Any) -> Any:
    """A fixture of `ctxgate serve --workers 2` in front of the test's `sim`, on its
    `db_url`, with `sections` passed on to `write_config`; stopped at the end, and with
    `clean`, that stop must be clean (exit 0, no traceback). `journals_here`: its working
    directory is the test's own (PostgreSQL's journals are kept under it)."""

    @pytest.fixture
    def served(sim: Simulator, db_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
        path = write_config(tmp_path, sim.base_url, db_url, **copy.deepcopy(sections))
        cwd = tmp_path if journals_here else None
        workers = ServeProcess(path, log=tmp_path / "ctxgate.log", workers=2, cwd=cwd)
        try:
            yield workers
        finally:
            code = workers.stop()
            if clean:
                assert "Traceback" not in workers.output(), workers.output()
                assert code == 0, workers.output()

    return served


# -- what the processes left ------------------------------------------------------------------


def query(url: str, sql: str) -> list[Any]:
    async def run() -> list[Any]:
        db = Database.connect(url)
        try:
            return await db.read(lambda conn: _rows(conn, sql))
        finally:
            await db.dispose()

    return asyncio.run(run())


async def _rows(conn: Any, sql: str) -> list[Any]:
    return list((await conn.execute(text(sql))).all())


def check_consistent(url: str) -> None:
    """The usage rows match the session counters, and every checkpoint is a valid history."""
    if url.startswith("sqlite"):
        assert query(url, "PRAGMA integrity_check")[0][0] == "ok"
    counts = query(
        url,
        "SELECT s.key, s.request_count, (SELECT count(*) FROM usage u WHERE u.session_id = s.id)"
        " FROM sessions s",
    )
    for key, request_count, usage_rows in counts:
        assert request_count == usage_rows, key  # counters and rows: one transaction
    for (raw,) in query(url, "SELECT messages FROM checkpoints"):
        check_invariants(json.loads(raw))


def history_over_threshold() -> list[dict[str, Any]]:
    """A coding agent's history just past 90% of the window: its first request compresses."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Constraint: never touch vendor/. Fix the build."},
    ]
    counter = counter_for_model("gpt-4o")
    i = 0
    while counter.count_messages(messages) < 0.9 * WINDOW:
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
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
