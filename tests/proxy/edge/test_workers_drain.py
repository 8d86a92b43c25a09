"""`ctxgate serve --workers 2` draining, for real: while a request in flight finishes, a new
connection is refused at once (a balancer's health check then fails fast instead of waiting
on a socket nobody accepts from)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import httpx

from tests.serving import (
    MODEL,
    WINDOW,
    ServeProcess,
    chat,
    database_fixture,
    workers_fixture,
)
from tests.simulator import Hang, ModelSpec, Reply, Simulator
from tests.simulator.fixtures import simulator_fixture

sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, validate_messages=True, chunk_delay_s=0.0
)
db_url = database_fixture()
served = workers_fixture(storage={"lock_wait_s": 30})


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
    sim.enqueue(Hang(seconds=5.0, then=Reply(content="the slow answer")))
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
    sim.wait_for(1, timeout=30)  # the request is upstream, held there for 5 s
    assert not _refused(served.port)
    served.process.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    refused_after: float | None = None
    while time.monotonic() - stopped_at < 2.0:
        if _refused(served.port):
            refused_after = time.monotonic() - stopped_at
            break
        time.sleep(0.05)
    draining = thread.is_alive()
    thread.join(60)
    http.close()
    assert refused_after is not None, "new connections were still accepted 2 s into the drain"
    print(f"\nnew connections refused {refused_after:.2f}s into the drain")
    assert draining, "the drain was over before the check: it proves nothing"
    assert "error" not in result, result  # the request in flight still finished
    assert result["answer"].parse().choices[0].message.content == "the slow answer"
    assert served.stop() == 0
