"""HAProxy in front of two ctxgate containers sharing PostgreSQL: a replica dies mid-session.

The topology of docker-compose.yml's postgres profile, run for real: the balancer image built
from deploy/haproxy (Debian's haproxy package, on the Debian base image that
scripts/docker-test-env.sh makes) with deploy/haproxy/haproxy.cfg, and two containers of the
ctxgate image built from this checkout. The database is the PostgreSQL test server
(CTXGATE_TEST_PG_URL) instead of compose's postgres:16-alpine service, which would need Docker
Hub; everything runs on the host network, so the balancer's server addresses are loopback
ports instead of compose's service names. The ctxgate containers run as the Kubernetes
Deployment does: read-only root filesystem, a tmpfs on /tmp, their data directory read-only.

One agent session sends its requests through the balancer: they alternate between the
replicas; compressions write checkpoints and archive rows. Then the replica serving a request
in flight is killed (SIGKILL). That request may fail; every later one must succeed, on the
other replica (so must those of other clients whose keep-alive connections to the balancer
sat idle through the kill, sent at once and again once the replica is marked down), from
the session's compressed state; and every checkpoint and archive row written before stays as
it was. Over the session, compressions keep being stored (on both
replicas, then on the survivor), the session stays one lineage (no request forks it), and
every client position the newest checkpoint replaces has its archive row (the admin audit).

Opt-in like tests/deploy/test_docker.py (CTXGATE_TEST_DOCKER=1, then never skipped; it also needs
CTXGATE_TEST_PG_URL):

    CTXGATE_TEST_DOCKER=1 CTXGATE_TEST_PG_URL="$(sh scripts/pg-test-server.sh)" \\
        .venv/bin/pytest -m docker tests/deploy/test_balancer.py -s
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.deploy.stack import (
    AGENT_KEY,
    WINDOW,
    Stack,
    all_logs,
    audit,
    balancer_image,
    pg_url,
    rows_of,
    stack,
    stored,
)
from tests.deploy.test_docker import OPTED_IN, Docker, docker, image
from tests.simulator import Hang, ModelSpec, Received, Simulator
from tests.simulator.fixtures import simulator_fixture

# Fixtures shared with tests/deploy/stack.py and tests/deploy/test_docker.py.
__all__ = ["balancer_image", "docker", "image", "pg_url", "stack"]

MODEL = "gpt-4o-mini"
HANG_MARK = "HANG-THIS-TURN"
BEFORE_KILL = 16  # turns before the kill: past the first compressions
AFTER_KILL = 8  # turns after it, on the survivor
IDLE_S = 15.0  # how long the idle clients' connections wait before the kill

pytestmark = [
    pytest.mark.docker,
    pytest.mark.postgres,
    pytest.mark.skipif(
        not OPTED_IN,
        reason="opt-in: CTXGATE_TEST_DOCKER=1 (needs root; scripts/docker-test-env.sh)",
    ),
]


class HoldMarkedTurn:
    """The simulator's responder: hold the marked turn upstream the first time it arrives (so
    it is in flight when its replica dies); its retry, and every other request, get the
    default reply."""

    def __init__(self) -> None:
        self.held = False

    def __call__(self, body: dict[str, Any]) -> Hang | None:
        messages = body.get("messages") or []
        if not self.held and messages and HANG_MARK in str(messages[-1].get("content")):
            self.held = True
            return Hang(seconds=120)
        return None


sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, responder=HoldMarkedTurn, validate_messages=True
)


def tool_turn(i: int) -> list[dict[str, Any]]:
    """One step of a coding agent: a tool call and its (unique, bulky) output."""
    call = {
        "id": f"call_t{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
    }
    output = f"# module {i}\n" + "".join(f"line {j} of module {i} = f({j})\n" for j in range(60))
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]


class Agent:
    """One session's client: the official SDK, no retries, through the balancer."""

    def __init__(self, url: str) -> None:
        self.session = f"lb-{uuid.uuid4().hex[:10]}"
        self.client = openai.OpenAI(
            base_url=f"{url}/v1", api_key=AGENT_KEY, max_retries=0, timeout=60
        )
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Constraint: never touch vendor/. Fix the build."},
        ]
        self.served_by: list[str] = []
        self.sent_lengths: list[int] = []

    def send(self, ask: str) -> str:
        """One request with `ask` as the newest user turn; the replica that served it."""
        messages = [*self.messages, {"role": "user", "content": ask}]
        self.sent_lengths.append(len(messages))
        raw = self.client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"X-Session-Id": self.session}
        )
        assert raw.parse().choices[0].message.content
        assert raw.headers["x-session-id"] == self.session
        replica = raw.headers["x-ctxgate-replica"]
        self.served_by.append(replica)
        return replica

    def step(self, i: int, ask: str | None = None) -> str:
        """Send turn i, then keep its ask and its tool step in the history, as an agent loop
        does: each request extends the one before. (An agent that dropped its ask would edit
        its history every turn: each request would then start a lineage of its own, see
        session/memory.py, and compress from the start.)"""
        ask = ask or f"Turn {i}: carry on."
        replica = self.send(ask)
        self.messages.append({"role": "user", "content": ask})
        self.messages.extend(tool_turn(i))
        return replica


def settle(sim: Simulator, quiet_s: float = 1.5, timeout: float = 60) -> None:
    """Wait until no upstream call (a background compression's summary) has come for a while."""
    deadline = time.monotonic() + timeout
    seen = len(sim.received)
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet_s:
        assert time.monotonic() < deadline, "upstream calls never stopped"
        time.sleep(0.2)
        if len(sim.received) != seen or any(r.outcome == "pending" for r in sim.received):
            seen = len(sim.received)
            quiet_since = time.monotonic()


class IdleClients:
    """Clients of other sessions, each on one keep-alive connection to the balancer that sits
    idle while the replica dies; then each sends requests on it (no retries of their own).
    They keep an idle connection as long as agents built on Go's or Rust's HTTP clients do
    (90 s), longer than httpx's default."""

    def __init__(self, url: str, count: int = 8) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=300)
        self.clients = [httpx.Client(base_url=url, limits=limits, timeout=30) for _ in range(count)]
        self.ports: dict[int, int] = {}  # client -> the local port of its one connection
        self.failures: list[str] = []
        self.served: list[str] = []

    def warm(self) -> None:
        for k, client in enumerate(self.clients):
            answer = client.get("/readyz")
            assert answer.status_code == 200
            self.ports[k] = _local_port(answer)

    def send_all(self, wave: str) -> None:
        """One request from every client at once, each on its idle connection."""
        threads = [
            threading.Thread(target=self._send, args=(k, f"{wave}-{k}"))
            for k in range(len(self.clients))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), f"a request of {wave} hung"

    def _send(self, k: int, name: str) -> None:
        client = self.clients[k]
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"idle {name}"}]}
        headers = {"Authorization": f"Bearer {AGENT_KEY}", "X-Session-Id": f"idle-{name}"}
        began = time.monotonic()
        try:
            answer = client.post("/v1/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            took = time.monotonic() - began
            self.failures.append(f"{name}: {type(exc).__name__} after {took:.2f}s: {exc}")
            return
        if answer.status_code != 200:
            self.failures.append(f"{name}: {answer.status_code} {answer.text[:200]}")
            return
        if _local_port(answer) != self.ports[k]:
            self.failures.append(f"{name}: its idle connection was closed; a new one served it")
            self.ports[k] = _local_port(answer)
        self.served.append(answer.headers["x-ctxgate-replica"])

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _local_port(response: httpx.Response) -> int:
    port: int = response.extensions["network_stream"].get_extra_info("client_addr")[1]
    return port


def held(received: Received) -> bool:
    """The marked turn, on hold upstream (no answer yet)."""
    messages = received.body.get("messages") or [{}]
    return received.status is None and HANG_MARK in str(messages[-1].get("content"))


def test_session_survives_a_replica_killed_mid_request(
    stack: Stack, sim: Simulator, pg_url: str, docker: Docker
) -> None:
    agent = Agent(stack.url)
    for i in range(BEFORE_KILL):
        agent.step(i)
    # Round robin, request by request, over both replicas.
    assert set(agent.served_by) == {"ctxgate-a", "ctxgate-b"}, agent.served_by
    assert all(a != b for a, b in zip(agent.served_by, agent.served_by[1:], strict=False)), (
        agent.served_by
    )
    settle(sim)
    checkpoints_before, archive_before = stored(pg_url, agent.session)
    assert checkpoints_before, "no compression before the kill: the test proves nothing"
    assert archive_before
    for process in stack.replicas.values():
        assert "could not store a compression" not in process.logs(), all_logs(stack)
    assert not any(r.problems for r in sim.chat_requests)

    # The next request goes to the other replica; it is held upstream, and that replica dies.
    doomed = "ctxgate-b" if agent.served_by[-1] == "ctxgate-a" else "ctxgate-a"
    survivor = "ctxgate-a" if doomed == "ctxgate-b" else "ctxgate-b"
    errors: list[BaseException] = []

    def in_flight() -> None:
        try:
            agent.send(f"Turn {BEFORE_KILL}: {HANG_MARK}")
        except BaseException as exc:  # the one request allowed to fail
            errors.append(exc)

    idle = IdleClients(stack.url)
    idle.warm()
    warmed = time.monotonic()
    thread = threading.Thread(target=in_flight)
    thread.start()
    deadline = time.monotonic() + 30
    while not any(held(r) for r in sim.chat_requests):
        if time.monotonic() > deadline:
            seen = [(r.outcome, r.is_summary, r.status) for r in sim.received[-6:]]
            tails = {name: process.logs()[-3000:] for name, process in stack.replicas.items()}
            pytest.fail(f"the marked turn never reached the upstream: {seen}\n{tails}")
        time.sleep(0.05)
    # Idle for longer than agents' own pauses between two requests often are.
    time.sleep(max(0.0, IDLE_S - (time.monotonic() - warmed)))
    docker("kill", stack.replicas[doomed].name)
    # Clients whose connections sat idle through the kill: their requests right after it
    # (the balancer may still count the dead replica up) and after it was marked down must
    # all be served, by the survivor, on the connections they had.
    # Waves of them, every 0.2 s from the kill until well after the health checks marked it
    # down (2 checks 1 s apart).
    killed = time.monotonic()
    waves = 0
    while time.monotonic() - killed < 4.0:
        idle.send_all(f"wave{waves}")
        waves += 1
        time.sleep(0.2)
    idle.close()
    assert idle.failures == [], idle.failures
    assert idle.served == [survivor] * (waves * len(idle.clients)), idle.served
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(errors) == 1, f"the in-flight request on the killed replica did not fail: {errors}"
    assert isinstance(errors[0], openai.APIStatusError | openai.APIConnectionError)
    assert not stack.replicas[doomed].state()["Running"]

    # The agent sends that turn again, as it was, and goes on: no error, all on the survivor.
    served_before = len(agent.served_by)
    agent.step(BEFORE_KILL, f"Turn {BEFORE_KILL}: {HANG_MARK}")
    for i in range(BEFORE_KILL + 1, BEFORE_KILL + 1 + AFTER_KILL):
        agent.step(i)
    assert agent.served_by[served_before:] == [survivor] * (AFTER_KILL + 1)
    settle(sim)

    checkpoints_after, archive_after = stored(pg_url, agent.session)
    # Compressions kept being stored on both replicas and on the survivor, not just the first
    # ones: a compression whose commit fails is still forwarded, without checkpoint or archive.
    assert len(checkpoints_after) > 2, (checkpoints_after.keys(), all_logs(stack))
    # One conversation, one lineage: every request (the retry included) extended the one
    # before, so none forked the session (a fork compresses from the start, on a row of its
    # own, and the oldest forks are evicted with their checkpoints and archive).
    assert rows_of(pg_url, agent.session) == [agent.session]
    # Every client position the newest checkpoint replaces has its archive row.
    report = audit(stack.url, agent.session)
    assert report["replaced"], report
    assert report["missing"] == [] and report["complete"] is True, (report, all_logs(stack))
    for process in stack.replicas.values():
        assert "could not store a compression" not in process.logs(), all_logs(stack)
    for row_id, row in checkpoints_before.items():
        assert checkpoints_after.get(row_id) == row, f"checkpoint {row_id} lost or changed"
    for row_id, row in archive_before.items():
        assert archive_after.get(row_id) == row, f"archive row {row_id} lost or changed"
    # The survivor carried the session's compressed state on: every request after the kill
    # went upstream shorter than the agent sent it.
    after_kill = [r for r in sim.chat_requests if not r.is_summary][-(AFTER_KILL + 1) :]
    sent = agent.sent_lengths[-(AFTER_KILL + 1) :]
    assert [len(r.body["messages"]) < n for r, n in zip(after_kill, sent, strict=True)] == [
        True
    ] * (AFTER_KILL + 1)

    assert not any(r.problems for r in sim.chat_requests)
    logs = stack.replicas[survivor].logs()
    assert "Traceback" not in logs, logs
