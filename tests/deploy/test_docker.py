"""The Docker image, built and run for real: uid 10001, sessions kept in a named volume.

Opt-in with CTXGATE_TEST_DOCKER=1, and then never skipped. It needs a Docker daemon and a base
image, which scripts/docker-test-env.sh provides (as root, from Debian's packages: Docker Hub is
not needed): CI runs it and sets the variable when the daemon starts. The daemon is the one at
CTXGATE_DOCKER_HOST, else the script is run here (it reuses a running daemon). The image is
built from this checkout with --build-arg BASE_IMAGE, and the container serves on the host
network with the provider simulator, on loopback, as its upstream.

    CTXGATE_TEST_DOCKER=1 .venv/bin/pytest -m docker tests/deploy/test_docker.py -s
    scripts/docker-test-env.sh stop     # afterwards, to stop the daemon
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from session.identity import scope_for
from tests.servers import free_port
from tests.simulator import Simulator

ROOT = Path(__file__).resolve().parents[2]
OPTED_IN = os.environ.get("CTXGATE_TEST_DOCKER") == "1"
# Debian's client (20.10, BuildKit built in): a newer CLI earlier on PATH wants a buildx plugin.
DOCKER = os.environ.get("CTXGATE_DOCKER_CLI", "/usr/bin/docker")
BASE_IMAGE = os.environ.get("CTXGATE_DOCKER_BASE", "ctxgate-base:bookworm")
UID = "10001"
AGENT_KEY = "sk-agent-docker"
ADMIN_KEY = "adm-docker"
SESSION = "docker-session-1"
MODEL = "gpt-4o-mini"
BUILD_TIMEOUT_S = 900

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not OPTED_IN,
        reason="opt-in: CTXGATE_TEST_DOCKER=1 (needs root; scripts/docker-test-env.sh)",
    ),
]


@dataclass(frozen=True)
class Docker:
    """Debian's docker client bound to one daemon."""

    host: str

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}
        done = subprocess.run(
            [DOCKER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(f"docker {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done


@pytest.fixture(scope="module")
def docker() -> Docker:
    host = os.environ.get("CTXGATE_DOCKER_HOST")
    if not host:
        started = subprocess.run(
            ["sh", str(ROOT / "scripts" / "docker-test-env.sh")],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if started.returncode != 0:
            pytest.fail(f"CTXGATE_TEST_DOCKER=1 but no Docker daemon:\n{started.stderr}")
        host = started.stdout.strip()
    client = Docker(host)
    client("image", "inspect", BASE_IMAGE)
    return client


@contextlib.contextmanager
def built(docker: Docker, name: str, context: Path) -> Iterator[str]:
    """An image built from `context` on the Debian base image, under a fresh tag; removed
    afterwards."""
    tag = f"{name}:{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    docker(
        "build",
        "--network",
        "host",
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "--tag",
        tag,
        str(context),
        timeout=BUILD_TIMEOUT_S,
    )
    print(f"\nimage {tag} built in {time.monotonic() - started:.1f}s")
    try:
        yield tag
    finally:
        docker("image", "rm", "--force", tag, check=False)


@pytest.fixture(scope="module")
def image(docker: Docker) -> Iterator[str]:
    with built(docker, "ctxgate-test", ROOT) as tag:
        yield tag
        # The build's intermediate layers: with the vfs driver each one is a full copy.
        docker("builder", "prune", "--force", check=False)


class Container:
    """One ctxgate container on the host network, with its data in a named volume."""

    def __init__(self, docker: Docker, image: str, upstream: str) -> None:
        self.docker = docker
        self.image = image
        self.upstream = upstream
        self.name = f"ctxgate-test-{uuid.uuid4().hex[:12]}"
        self.volume = f"{self.name}-data"
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        docker("volume", "create", self.volume)
        self.run()

    def run(self) -> None:
        self.docker(
            "run",
            "--detach",
            "--name",
            self.name,
            "--network",
            "host",
            "--volume",
            f"{self.volume}:/var/lib/ctxgate",
            "--env",
            f"CTXGATE_PORT={self.port}",
            "--env",
            f"CTXGATE_UPSTREAM_URL={self.upstream}",
            "--env",
            f"CTXGATE_ADMIN_KEY={ADMIN_KEY}",
            "--env",
            "CTXGATE_LOG_LEVEL=warning",
            self.image,
        )

    def replace(self) -> None:
        """A new container from the image on the same volume (what an upgrade does)."""
        self.docker("rm", "--force", self.name)
        self.run()

    def state(self) -> dict[str, Any]:
        out = self.docker("inspect", "--format", "{{json .State}}", self.name).stdout
        state: dict[str, Any] = json.loads(out)
        return state

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.root}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if not self.state()["Running"] or time.monotonic() > deadline:
                pytest.fail(f"container did not become ready:\n{self.logs()}")
            time.sleep(0.2)

    def wait_healthy(self, timeout: float = 60) -> None:
        """Docker's own verdict from the image's HEALTHCHECK (first probe after its interval)."""
        deadline = time.monotonic() + timeout
        while (health := self.state()["Health"]["Status"]) != "healthy":
            if health == "unhealthy" or time.monotonic() > deadline:
                pytest.fail(f"health check: {self.state()['Health']}\n{self.logs()}")
            time.sleep(0.5)

    def exec(self, *command: str) -> str:
        return self.docker("exec", self.name, *command).stdout.strip()

    def logs(self) -> str:
        done = self.docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        self.docker("rm", "--force", "--volumes", self.name, check=False)
        self.docker("volume", "rm", "--force", self.volume, check=False)


@pytest.fixture
def container(docker: Docker, image: str, sim: Simulator) -> Iterator[Container]:
    started = Container(docker, image, sim.base_url)
    try:
        yield started
    finally:
        started.remove()


def chat(container: Container, text: str) -> tuple[str, str]:
    """One request through the SDK: the reply's text and the session id ctxgate used."""
    client = openai.OpenAI(base_url=f"{container.root}/v1", api_key=AGENT_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Session-Id": SESSION},
    )
    reply = raw.parse().choices[0].message.content or ""
    return reply, raw.headers["x-session-id"]


def session_row(container: Container, want_requests: int, timeout: float = 15) -> dict[str, Any]:
    """The session as the admin API reads it from the database (usage is written behind)."""
    url = f"{container.root}/admin/sessions/{scope_for(AGENT_KEY)}/{quote(SESSION, safe='')}"
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(url, headers=headers, timeout=5)
        assert response.status_code in (200, 404), response.text
        body: dict[str, Any] = response.json() if response.status_code == 200 else {}
        session: dict[str, Any] = body.get("session", {})
        if session.get("request_count") == want_requests or time.monotonic() > deadline:
            return session
        time.sleep(0.2)


def stored_request_count(container: Container) -> int | None:
    """The session's request_count read from the volume's SQLite file, by another container."""
    query = (
        "import sqlite3, sys; row = sqlite3.connect('/data/ctxgate.db').execute("
        "'SELECT request_count FROM sessions WHERE scope = ? AND key = ?', sys.argv[1:]"
        ").fetchone(); print(row[0] if row else '')"
    )
    out = container.docker(
        "run",
        "--rm",
        "--network",
        "none",
        # ctxgate's uid: SQLite may create its -wal/-shm files there, which ctxgate must own.
        "--user",
        f"{UID}:{UID}",
        "--volume",
        f"{container.volume}:/data",
        BASE_IMAGE,
        "python",
        "-c",
        query,
        scope_for(AGENT_KEY),
        SESSION,
    ).stdout.strip()
    return int(out) if out else None


def test_image_runs_as_10001_and_keeps_sessions_in_its_volume(
    container: Container, sim: Simulator
) -> None:
    started = time.monotonic()
    container.wait_healthy()
    assert container.exec("id", "-u") == UID

    reply, session_id = chat(container, "hello from the container")
    assert reply == "ok: hello from the container"
    assert session_id == SESSION
    (received,) = sim.chat_requests
    assert received.body["messages"] == [{"role": "user", "content": "hello from the container"}]
    # No upstream key in the config: the client's own key is forwarded.
    assert received.headers["authorization"] == f"Bearer {AGENT_KEY}"
    before = session_row(container, want_requests=1)
    assert before["request_count"] == 1, before
    database = "/var/lib/ctxgate/ctxgate.db"
    assert container.exec("stat", "-c", "%u %a", database).split()[0] == UID

    first_start = container.state()["StartedAt"]
    container.docker("restart", "--time", "10", container.name)
    container.wait_ready()
    assert container.state()["StartedAt"] != first_start
    assert session_row(container, want_requests=1) == before

    # Only the volume outlives the container: the row must be in the SQLite file there.
    container.docker("stop", "--time", "10", container.name)
    assert stored_request_count(container) == 1
    container.replace()
    container.wait_ready()
    assert session_row(container, want_requests=1) == before

    reply, _ = chat(container, "and again in a new container")
    assert reply == "ok: and again in a new container"
    assert len(sim.chat_requests) == 2
    again = session_row(container, want_requests=2)
    assert again["request_count"] == 2, again
    assert again["created_at"] == before["created_at"]  # the same session row, not a new one
    assert "Traceback" not in container.logs()
    print(f"\ncontainer test (after the build) took {time.monotonic() - started:.1f}s")
