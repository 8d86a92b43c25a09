"""`ctxgate serve --workers N`: N processes serving one port, under a supervisor.

The supervisor (the process `ctxgate serve` started) binds one listening socket per worker,
all on the same address with SO_REUSEPORT, so that the kernel hashes each new connection to
one of them: a burst of connections spreads evenly, where with one shared socket whichever
worker wakes first accepts all that wait, which need not be even. The supervisor keeps the
sockets open for the whole run, so the connections waiting on a crashed worker's socket wait
for its replacement instead of being refused. Before that it binds the address once without
SO_REUSEPORT, so that a port another server already listens on is refused as it would be with
one process.

Workers are spawned (fresh interpreters, given their socket and the settings the supervisor
read once) and each builds its own app. They share the database (SQLite in WAL mode
on one host, or PostgreSQL), whose leases already serialise one session's compressions across
processes, and prometheus_client's multiprocess mode in a directory of this run, which
`/metrics` adds up (session.metrics).

SIGTERM or SIGINT: the supervisor closes its listening sockets and every worker gets SIGTERM
and drains (uvicorn's graceful shutdown: its socket closed, so a new connection is refused at
once; in-flight requests finish, then the app's shutdown writes out queued usage), and
the supervisor exits 0 once all have; a second SIGINT makes them stop waiting. A worker
that exits on its own is replaced, at once the first time, then after a delay that doubles
(up to 30 s) while its replacements die within 30 s of their start. A first-generation worker
that fails its start-up (the database unreachable, say) stops the server with status 3: every
replacement would fail the same way.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.context import SpawnProcess
from pathlib import Path
from types import FrameType

import uvicorn

from proxy.edge.app import create_app
from proxy.edge.logs import configure_logging
from proxy.edge.services import build_engine
from session.config.settings import Settings
from session.metrics import MULTIPROCESS_ENV, process_gone

log = logging.getLogger("ctxgate")

GRACEFUL_S = 10  # in-flight requests get this long to finish, as with one process
DRAIN_S = GRACEFUL_S + 20.0  # and the app's shutdown the rest; a worker still alive is killed
STARTUP_FAILURE = 3  # uvicorn's exit status for a server that never started serving
_STABLE_S = 30.0  # a worker that lived this long is replaced at once
_RESTART_MAX_S = 30.0  # the longest wait before a replacement
_BACKLOG = 2048
_METRICS_PREFIX = "ctxgate-metrics-"
_CLEAN = (0, -signal.SIGTERM, -signal.SIGINT)  # a worker stopped by the supervisor's signal


@dataclass(frozen=True, slots=True)
class WorkerJob:
    """What one worker process is given (pickled to it; the socket travels as a descriptor)."""

    settings: Settings
    sock: socket.socket
    supervisor: int
    prepare: Callable[[], None]


def serve_workers(
    settings: Settings, host: str, port: int, workers: int, prepare: Callable[[], None]
) -> int:
    """Serve `host:port` with `workers` processes until SIGTERM/SIGINT; the exit status.

    `prepare` runs in each worker once its app is built, before it serves (a module-level
    function: it is pickled by name).
    """
    build_engine(settings)  # a bad engine option fails here, not in every worker
    try:
        sockets = bind_sockets(host, port, workers)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return 1
    metrics_dir = _metrics_dir()
    # Written, not read: the workers inherit it, and their prometheus_client reads it.
    os.environ[MULTIPROCESS_ENV] = metrics_dir  # noqa: TID251
    log.info(
        "ctxgate listening on http://%s:%d with %d workers (storage %s)",
        host,
        sockets[0].getsockname()[1],
        workers,
        settings.storage.url.split("://")[0],
    )
    try:
        return Supervisor(settings, sockets, prepare, metrics_dir).run()
    finally:
        for sock in sockets:
            sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def bind_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one address, each with SO_REUSEPORT."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Without SO_REUSEPORT: fails if any server listens there (one with SO_REUSEPORT too), and
    # gives port 0 its number.
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets whose proto says TCP.
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(_BACKLOG)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _metrics_dir() -> str:
    """A fresh directory for this run's metric files; those of supervisors that died without
    removing theirs (kill -9) are removed first."""
    for stale in Path(tempfile.gettempdir()).glob(f"{_METRICS_PREFIX}*-*"):
        pid = stale.name[len(_METRICS_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{_METRICS_PREFIX}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


# --- the supervisor ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Slot:
    """One worker's place: its socket, and the process serving it now (None: between two)."""

    sock: socket.socket
    process: SpawnProcess | None = None
    generation: int = 0
    started_at: float = 0.0
    delay_s: float = 0.0
    restart_at: float = 0.0


class Supervisor:
    """Starts a worker per socket, replaces those that exit, drains them all on a signal."""

    def __init__(
        self,
        settings: Settings,
        sockets: list[socket.socket],
        prepare: Callable[[], None],
        metrics_dir: str,
    ) -> None:
        self._settings = settings
        self._prepare = prepare
        self._metrics_dir = metrics_dir
        self._slots = [_Slot(sock) for sock in sockets]
        self._spawn = multiprocessing.get_context("spawn")
        self._signals: list[int] = []
        self._draining = False
        self._status = 0

    def run(self) -> int:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        # A signal writes a byte to wake_w, so the wait below returns at once.
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno())
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in self._slots:
                self._start(slot)
            while not self._signals and self._status == 0:
                self._wait(wake_r, self._next_wake())
                self._reap_and_restart()
            self._drain(wake_r)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(old_wakeup)
            wake_r.close()
            wake_w.close()
        return self._status

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)
        if self._draining and signum == signal.SIGINT:
            self._signal_all(signal.SIGINT)  # as in uvicorn: a second SIGINT stops the waiting

    def _start(self, slot: _Slot) -> None:
        job = WorkerJob(self._settings, slot.sock, os.getpid(), self._prepare)
        process = self._spawn.Process(
            target=run_worker, args=(job,), name=f"ctxgate-worker-{self._slots.index(slot)}"
        )
        process.start()
        slot.process = process
        slot.generation += 1
        slot.started_at = time.monotonic()

    def _next_wake(self) -> float:
        pending = [s.restart_at for s in self._slots if s.process is None]
        return max(0.0, min(pending) - time.monotonic()) if pending else 5.0

    def _wait(self, wake_r: socket.socket, timeout: float) -> None:
        sentinels = [s.process.sentinel for s in self._slots if s.process is not None]
        wait([*sentinels, wake_r], timeout)
        try:
            while wake_r.recv(64):
                pass
        except BlockingIOError:
            pass

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            process = slot.process
            if process is not None and process.exitcode is not None:
                self._reap(slot, process, now)
            if slot.process is None and now >= slot.restart_at and self._status == 0:
                self._start(slot)

    def _reap(self, slot: _Slot, process: SpawnProcess, now: float) -> None:
        code, pid = process.exitcode, process.pid
        assert pid is not None
        process_gone(pid, self._metrics_dir)
        process.close()
        slot.process = None
        if code == STARTUP_FAILURE and slot.generation == 1:
            log.error("worker %d failed to start; stopping ctxgate", pid)
            self._status = STARTUP_FAILURE
            return
        lived = now - slot.started_at
        slot.delay_s = (
            0.0 if lived >= _STABLE_S else min(max(1.0, 2 * slot.delay_s), _RESTART_MAX_S)
        )
        slot.restart_at = now + slot.delay_s
        log.error(
            "worker %d exited with status %s after %.0f s; starting its replacement in %.0f s",
            pid,
            code,
            lived,
            slot.delay_s,
        )

    def _drain(self, wake_r: socket.socket) -> None:
        self._draining = True
        # The listening sockets close first, here and (as uvicorn's shutdown starts) in each
        # worker: a new connection is then refused at once, so a balancer's health check
        # fails fast, where a socket left open would queue it unanswered until the end.
        for slot in self._slots:
            slot.sock.close()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + DRAIN_S
        while any(s.process is not None for s in self._slots):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wait(wake_r, left)
            for slot in self._slots:
                process = slot.process
                if process is not None and process.exitcode is not None:
                    self._finished(slot, process)
        for slot in self._slots:
            process = slot.process
            if process is not None:
                log.error("worker %s still running %.0f s after SIGTERM", process.pid, DRAIN_S)
                process.kill()
                process.join()
                self._finished(slot, process)

    def _finished(self, slot: _Slot, process: SpawnProcess) -> None:
        if process.exitcode not in _CLEAN and self._status == 0:
            log.error("worker %s stopped with status %s", process.pid, process.exitcode)
            self._status = 1
        process.close()
        slot.process = None

    def _signal_all(self, signum: int) -> None:
        for slot in self._slots:
            if slot.process is not None and slot.process.pid is not None:
                try:
                    os.kill(slot.process.pid, signum)
                except ProcessLookupError:
                    pass  # exited; reaped by the loop


# --- in the worker process --------------------------------------------------------------------


def run_worker(job: WorkerJob) -> None:
    """A worker's main: serve its socket until SIGTERM, drain, exit 0 (3: it never started)."""
    configure_logging(job.settings.logging)
    stop = _Stop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    try:
        app = create_app(job.settings)
    except Exception:
        log.exception("worker %d could not build its app", os.getpid())
        sys.exit(STARTUP_FAILURE)
    config = uvicorn.Config(
        app,
        lifespan="on",  # a failed start-up stops the worker, not a worker without services
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    server = stop.server = uvicorn.Server(config)
    server.should_exit = stop.requested
    threading.Thread(
        target=_follow, args=(server, job.supervisor), name="supervisor-watch", daemon=True
    ).start()
    job.prepare()
    server.run(sockets=[job.sock])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


class _Stop:
    """The worker's signal handler outside uvicorn's own: before it serves (a stop while the
    app is built), and after, when uvicorn raises the signal again once it has drained (the
    worker then exits 0 instead of dying of it)."""

    def __init__(self) -> None:
        self.server: uvicorn.Server | None = None
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self.server is not None:
            self.server.should_exit = True


def _follow(server: uvicorn.Server, supervisor: int) -> None:
    """Stop this worker if its supervisor dies without stopping it (kill -9)."""
    while os.getppid() == supervisor:
        time.sleep(1.0)
    log.error("the supervisor (pid %d) is gone; stopping worker %d", supervisor, os.getpid())
    server.should_exit = True
