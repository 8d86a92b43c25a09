"""Compression passes in the process pool: the same views as on the loop, and a worker that
dies mid-pass (kill -9) answered like a failed summary, the conversation going on."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any

import openai

from session.pool import EnginePool, pool_size
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import Hang, ModelSpec, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture

MODEL = "agent-8k"
WINDOW = 8192

sim8k = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def start_proxy(sim: Simulator, db_path: str, processes: int) -> ProxyServer:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    server = {"pool_processes": processes}
    # Compressed on arrival: a background compression would race the next request.
    compression = {"background": False}
    return ProxyServer(
        settings_for(sim.base_url, db_path, models=models, server=server, compression=compression)
    )


def client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)


def forwarded(sim: Simulator) -> list[Any]:
    return [r.body["messages"] for r in sim.chat_requests if not r.is_summary]


def run(sim: Simulator, db_path: str, processes: int, steps: int) -> tuple[list[Any], int]:
    with start_proxy(sim, db_path, processes) as proxy:
        loop = AgentLoop(client(proxy), MODEL, session_id="pooled")
        loop.script(sim)
        for step in range(steps):
            loop.step(step)
        pool = proxy.services.pool
        return forwarded(sim), pool.offloaded if pool is not None else 0


# Seven compressions. Each after the first plans with figures learned from earlier answers
# (the last real prompt size, the calibration), so the two runs agree only if every answer's
# usage reads back the same whatever the timing: a row read while its usage still lingered in
# the write-behind once missed it (storage.cache.Unwritten), and the slower pooled run anchored
# on other figures from its third compression on.
STEPS = 30


def test_the_pool_forwards_what_the_loop_would(tmp_path: Any) -> None:
    views = []
    for processes in (0, 1):
        with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
            sent, offloaded = run(sim, str(tmp_path / f"p{processes}.db"), processes, STEPS)
            assert len(sim.summary_requests) >= 6, "the conversation never reached compression"
            assert (offloaded >= 1) if processes else offloaded == 0
            views.append(sent)
    assert views[0] == views[1]


def test_a_worker_killed_mid_pass_is_a_failed_summary(sim8k: Simulator, db_path: str) -> None:
    with start_proxy(sim8k, db_path, 1) as proxy:
        pool = proxy.services.pool
        assert pool is not None and pool.running
        loop = AgentLoop(client(proxy), MODEL, session_id="killed")
        loop.script(sim8k)
        agent = sim8k.responder
        assert agent is not None
        hang = Hang(seconds=3)
        sim8k.responder = lambda body: hang if is_summary_request(body) else agent(body)
        errors: list[BaseException] = []

        def drive() -> None:
            try:
                for step in range(30):
                    if sim8k.summary_requests and pool.failed:
                        return
                    loop.step(step)
            except BaseException as error:  # surfaced in the test's thread
                errors.append(error)

        driver = threading.Thread(target=drive)
        driver.start()
        deadline = time.monotonic() + 60
        while not sim8k.summary_requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sim8k.summary_requests, "the conversation never reached compression"
        (worker,) = pool._workers
        victim = worker.process.pid
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        driver.join(60)
        assert not driver.is_alive() and errors == []
        assert pool.failed == 1
        (replacement,) = pool._workers
        assert replacement.process.pid != victim and replacement.process.is_alive()
        # Every request was answered, the failed pass's one uncompressed.
        assert all(r.choices for r in loop.responses)


def test_the_size_is_shared_out_over_the_workers() -> None:
    assert pool_size(None, workers=1, cores=2) == 1
    assert pool_size(None, workers=1, cores=8) == 7
    assert pool_size(None, workers=2, cores=8) == 3
    assert pool_size(None, workers=4, cores=2) == 1
    assert pool_size(0, workers=1, cores=8) == 0
    assert pool_size(6, workers=3, cores=2) == 2
    assert EnginePool(0).running is False


def test_a_call_runs_in_a_worker_and_in_a_thread_without_one() -> None:
    async def run(size: int) -> int:
        pool = EnginePool(size)
        pool.start()
        try:
            return await pool.call(os.getpid)
        finally:
            pool.close()

    assert asyncio.run(run(1)) != os.getpid()
    assert asyncio.run(run(0)) == os.getpid()


def test_a_worker_lost_after_its_loop_closed_is_let_go_quietly() -> None:
    async def started() -> EnginePool:
        pool = EnginePool(1)
        pool.start()
        await pool.call(os.getpid)
        return pool

    pool = asyncio.run(started())  # the loop the worker reports to is closed from here
    readers = [w._reader for w in pool._workers]
    raised: list[BaseException | None] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        pool.close()  # the reader sees the pipe close and has no loop to tell
        for reader in readers:
            reader.join(5)
    finally:
        threading.excepthook = hook
    assert not any(reader.is_alive() for reader in readers)
    assert raised == []
