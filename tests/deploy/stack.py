"""The balancer test's stack: HAProxy in front of two ctxgate containers sharing a PostgreSQL
database of their own, on the host network (see tests/deploy/test_balancer.py), and what the
test reads back from it: the session's rows in the database, the admin API's audit, the logs.

The balancer image is built from deploy/haproxy on the Debian base image that
scripts/docker-test-env.sh makes; the ctxgate containers run as the Kubernetes Deployment does
(read-only root filesystem, a tmpfs on /tmp, their data directory read-only).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from session.identity import scope_for
from tests.deploy.test_docker import Docker, built
from tests.servers import free_port
from tests.simulator import Simulator
from tests.storage.factories import own_database

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("CTXGATE_TEST_PG_URL", "")
AGENT_KEY = "sk-agent-balancer"
ADMIN_KEY = "sk-admin-balancer"
WINDOW = 8192


@pytest.fixture(scope="module")
def balancer_image(docker: Docker) -> Iterator[str]:
    with built(docker, "ctxgate-balancer-test", ROOT / "deploy" / "haproxy") as tag:
        yield tag


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database of its own on the test server: other tests drop the shared one's schema."""
    if not PG_URL:
        pytest.fail("CTXGATE_TEST_DOCKER=1 needs CTXGATE_TEST_PG_URL (scripts/pg-test-server.sh)")
    with own_database(PG_URL, "ctxgate_lb") as url:
        yield url


@dataclass
class Process:
    """One container on the host network."""

    docker: Docker
    name: str

    def state(self) -> dict[str, Any]:
        out = self.docker("inspect", "--format", "{{json .State}}", self.name).stdout
        state: dict[str, Any] = json.loads(out)
        return state

    def logs(self) -> str:
        done = self.docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def wait_ready(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not self.state()["Running"] or time.monotonic() > deadline:
                pytest.fail(f"{self.name} did not become ready:\n{self.logs()}")
            time.sleep(0.2)

    def remove(self) -> None:
        self.docker("rm", "--force", "--volumes", self.name, check=False)


@dataclass
class Stack:
    balancer: Process
    url: str
    replicas: dict[str, Process]  # by the balancer's server name


def start_replica(
    docker: Docker, image: str, sim: Simulator, pg_url: str, data: Path, name: str
) -> tuple[Process, int]:
    port = free_port()
    process = Process(docker, f"ctxgate-lb-test-{name}-{uuid.uuid4().hex[:8]}")
    docker(
        "run",
        "--detach",
        "--name",
        process.name,
        "--network",
        "host",
        # As the Kubernetes Deployment runs it: nothing on the image's filesystem is writable.
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--volume",
        f"{data}:/var/lib/ctxgate:ro",
        "--env",
        f"CTXGATE_PORT={port}",
        "--env",
        f"CTXGATE_DATABASE_URL={pg_url}",
        "--env",
        f"CTXGATE_UPSTREAM_URL={sim.base_url}",
        "--env",
        f"CTXGATE_CONTEXT_LENGTH={WINDOW}",
        "--env",
        "CTXGATE_LOG_LEVEL=warning",
        "--env",
        f"CTXGATE_ADMIN_KEY={ADMIN_KEY}",
        image,
    )
    return process, port


@pytest.fixture
def stack(
    docker: Docker,
    image: str,
    balancer_image: str,
    sim: Simulator,
    pg_url: str,
    tmp_path: Path,
) -> Iterator[Stack]:
    data = tmp_path / "data"
    data.mkdir()
    started: list[Process] = []
    try:
        replicas: dict[str, Process] = {}
        ports: dict[str, int] = {}
        for name in ("ctxgate-a", "ctxgate-b"):
            process, port = start_replica(docker, image, sim, pg_url, data, name)
            started.append(process)
            replicas[name], ports[name] = process, port
        for name, process in replicas.items():
            process.wait_ready(f"http://127.0.0.1:{ports[name]}/readyz")
        lb_port = free_port()
        balancer = Process(docker, f"ctxgate-lb-test-haproxy-{uuid.uuid4().hex[:8]}")
        docker(
            "run",
            "--detach",
            "--name",
            balancer.name,
            "--network",
            "host",
            "--env",
            f"CTXGATE_BALANCER_PORT={lb_port}",
            "--env",
            f"CTXGATE_REPLICA_A=127.0.0.1:{ports['ctxgate-a']}",
            "--env",
            f"CTXGATE_REPLICA_B=127.0.0.1:{ports['ctxgate-b']}",
            balancer_image,
        )
        started.append(balancer)
        url = f"http://127.0.0.1:{lb_port}"
        balancer.wait_ready(f"{url}/readyz")
        yield Stack(balancer, url, replicas)
    finally:
        for process in started:
            process.remove()


def stored(pg_url: str, session: str) -> tuple[dict[int, tuple[Any, ...]], dict[int, Any]]:
    """The session's checkpoint rows and archive rows, by id, read from PostgreSQL."""

    async def read() -> tuple[dict[int, tuple[Any, ...]], dict[int, Any]]:
        engine = create_async_engine(pg_url)
        try:
            async with engine.connect() as conn:
                session_id = (
                    await conn.execute(
                        text("SELECT id FROM sessions WHERE scope = :scope AND key = :key"),
                        {"scope": scope_for(AGENT_KEY), "key": session},
                    )
                ).scalar_one()
                checkpoints = await conn.execute(
                    text(
                        "SELECT id, prefix_len, prefix_digest, messages FROM checkpoints "
                        "WHERE session_id = :id"
                    ),
                    {"id": session_id},
                )
                archive = await conn.execute(
                    text(
                        "SELECT id, checkpoint_id, position, digest, message "
                        "FROM archived_messages WHERE session_id = :id"
                    ),
                    {"id": session_id},
                )
                return (
                    {row[0]: tuple(row[1:]) for row in checkpoints},
                    {row[0]: tuple(row[1:]) for row in archive},
                )
        finally:
            await engine.dispose()

    return asyncio.run(read())


def rows_of(pg_url: str, session: str) -> list[str]:
    """The keys of every session row of the client's session id: its own, and any lineage
    (a fork is `<id>#<digest>`) or rotation under it."""

    async def read() -> list[str]:
        engine = create_async_engine(pg_url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text(
                        "SELECT key FROM sessions WHERE scope = :scope "
                        "AND (key = :key OR root_key = :key OR key LIKE :forks)"
                    ),
                    {"scope": scope_for(AGENT_KEY), "key": session, "forks": f"{session}#%"},
                )
                return sorted(row[0] for row in rows)
        finally:
            await engine.dispose()

    return asyncio.run(read())


def audit(url: str, session: str) -> dict[str, Any]:
    """The admin API's archive audit of the session's newest checkpoint."""
    response = httpx.get(
        f"{url}/admin/sessions/{scope_for(AGENT_KEY)}/{session}/audit",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def all_logs(stack: Stack) -> str:
    return "\n".join(f"--- {name}\n{p.logs()[-4000:]}" for name, p in stack.replicas.items())
