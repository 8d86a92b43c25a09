"""Compression passes in worker processes, so that a large one never stalls the event loop.

    pool = EnginePool(size=1, timeout_s=60.0)
    pool.start()                                   # in the app's lifespan
    result = await pool.compress(engine, view, ctx)
    pool.close()

A pass's CPU work (plan, prune, select, assemble, counting) runs in a worker; its summary call
stays an async upstream call of this process: the worker sends the `SummaryCall` back, this
process makes it and returns the reply (or the error) to the worker, which goes on. A worker
serves several passes at once: while one waits for its summary, another computes.

What crosses: the engine, the view and the context less its summarizer (the counter travels as
its recipe: see `compression.counting.tokens`); back come the result and its messages, each
one the view held as it was sent as its position (the caller's own object is put back, so
that the identity the session's provenance reads survives the trip), the rest as new dicts.

A pass that raises, outlives `timeout_s` of its own work (time spent waiting for its summary
does not count) or loses its worker is answered like a failed summary: the view unchanged,
outcome "aborted", the failure class (`timeout` or `other`) and its cooldown in the state. An
engine or counter that cannot be pickled (a custom one) runs here as before.

May import: `compression` (its face), the standard library.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, TypeVar, cast

from compression import (
    CompressionContext,
    CompressionResult,
    CompressorOptions,
    ContextEngine,
    EngineState,
    Message,
    Summarizer,
    SummaryCall,
    SummaryCallError,
    SummaryReply,
    TokenCounter,
    cooldown_seconds,
    with_failure,
)

log = logging.getLogger("ctxgate.pool")

T = TypeVar("T")
POLL_S = 0.25  # how often a waiting pass checks its own deadline


def pool_size(setting: int | None, workers: int, cores: int | None = None) -> int:
    """Processes one server process gets: `setting` (None: the cores less one) shared out over
    the `workers` serving the port, at least one each unless the setting is 0."""
    usable = cores if cores is not None else len(os.sched_getaffinity(0))
    total = max(usable - 1, 1) if setting is None else setting
    if total <= 0:
        return 0
    return max(1, total // max(workers, 1))


@dataclass(slots=True)
class _Job:
    view: Sequence[Message]
    summarize: Summarizer | None
    done: asyncio.Future[Any]
    started: float = field(default_factory=time.perf_counter)
    waited_s: float = 0.0  # time spent in summary calls: not the pass's own work
    summarizing: int = 0


class _Worker:
    """One worker process and the thread reading what it sends."""

    def __init__(self, context: Any, loop: asyncio.AbstractEventLoop, pool: EnginePool) -> None:
        ours, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(theirs,), daemon=True)
        self.process.start()
        theirs.close()
        self.conn: Connection = ours
        self.jobs: set[int] = set()
        self._sending = threading.Lock()
        self._loop, self._pool = loop, pool
        self._reader = threading.Thread(target=self._read, daemon=True, name="ctxgate-pool")
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.conn.recv_bytes()
            except (EOFError, OSError):
                self._report(self._pool._lost, self)
                return
            if not self._report(self._pool._received, self, data):
                return

    def _report(self, callback: Callable[..., None], *args: Any) -> bool:
        """Hand `callback` to the loop; False once the loop is closed (the pool was closed with
        it, and nobody waits for this worker any more)."""
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            return False
        return True

    def send(self, data: bytes) -> None:
        with self._sending:
            self.conn.send_bytes(data)

    def stop(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class EnginePool:
    """`size` worker processes (0: every pass runs on the caller's loop)."""

    def __init__(
        self, size: int, timeout_s: float = 60.0, warm: Sequence[TokenCounter] = ()
    ) -> None:
        self.size = size
        # Counters each worker builds as it starts (pickled as their recipes): an encoding
        # takes a second or more to load, which the first large pass would otherwise wait for.
        self.warm = tuple(warm)
        self.timeout_s = timeout_s
        self._workers: list[_Worker] = []
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: Any = None
        self._closing = False
        self.offloaded = 0  # passes run in a worker
        self.failed = 0  # of them, answered as failures

    @property
    def running(self) -> bool:
        return bool(self._workers)

    def start(self) -> None:
        """Start the workers (from the loop that will use them)."""
        if self.size <= 0 or self._workers:
            return
        self._loop = asyncio.get_running_loop()
        # forkserver: the server has threads by now, and a fork would copy their locks.
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["compression", "session.pool"])
        self._workers = [self._spawn() for _ in range(self.size)]

    def _spawn(self) -> _Worker:
        assert self._loop is not None
        worker = _Worker(self._context, self._loop, self)
        try:
            worker.send(pickle.dumps(("warm", 0, self.warm), protocol=pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, TypeError, AttributeError):
            pass  # a counter without a recipe: built by the first pass instead
        return worker

    def close(self) -> None:
        self._closing = True
        for worker in self._workers:
            worker.stop()
        self._workers = []

    async def compress(
        self, engine: ContextEngine, view: Sequence[Message], ctx: CompressionContext
    ) -> CompressionResult:
        if not self._workers:
            return await engine.compress(view, ctx)
        job_id = next(self._ids)
        try:
            sent = replace(ctx, summarize=None)
            payload = ("job", job_id, engine, list(view), sent, ctx.summarize is not None)
            data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return await engine.compress(view, ctx)  # a custom engine or counter: run here
        assert self._loop is not None
        job = _Job(view, ctx.summarize, self._loop.create_future())
        worker = min(self._workers, key=lambda w: len(w.jobs))
        self._jobs[job_id] = job
        worker.jobs.add(job_id)
        self.offloaded += 1
        try:
            try:
                await asyncio.to_thread(worker.send, data)
            except OSError as error:  # the worker is gone: `_lost` replaces it
                self.failed += 1
                return failed_pass(engine, view, ctx, "other", f"could not reach it: {error}")
            return await self._outcome(job_id, job, worker, engine, ctx)
        finally:
            self._jobs.pop(job_id, None)
            worker.jobs.discard(job_id)

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker (a module-level function: it is pickled by name), or
        in a thread when the pool has no worker or the worker fails it."""
        if not self._workers:
            return await asyncio.to_thread(function, *args)
        assert self._loop is not None
        job_id = next(self._ids)
        data = pickle.dumps(("call", job_id, function, args), protocol=pickle.HIGHEST_PROTOCOL)
        job = _Job((), None, self._loop.create_future())
        worker = min(self._workers, key=lambda w: len(w.jobs))
        self._jobs[job_id] = job
        worker.jobs.add(job_id)
        try:
            await asyncio.to_thread(worker.send, data)
            done = await asyncio.wait_for(job.done, self.timeout_s)
        except (OSError, TimeoutError) as error:
            log.warning("a pool call failed (%s); running it in a thread", error)
            return await asyncio.to_thread(function, *args)
        finally:
            self._jobs.pop(job_id, None)
            worker.jobs.discard(job_id)
        if isinstance(done, CompressionResult) and done.failure_class == "pool":
            log.warning("a pool call failed (%s); running it in a thread", done.error)
            return await asyncio.to_thread(function, *args)
        return cast(T, done)

    async def _outcome(
        self,
        job_id: int,
        job: _Job,
        worker: _Worker,
        engine: ContextEngine,
        ctx: CompressionContext,
    ) -> CompressionResult:
        while True:
            own = time.perf_counter() - job.started - job.waited_s
            left = self.timeout_s - own
            if left <= 0 and not job.summarizing:
                self.failed += 1
                log.error(
                    "a compression pass ran past %.0f s in the pool; its worker is replaced",
                    self.timeout_s,
                )
                self._replace(worker)
                why = f"the compression pass ran past {self.timeout_s:g} s"
                return failed_pass(engine, job.view, ctx, "timeout", why)
            done, _ = await asyncio.wait({job.done}, timeout=min(max(left, 0.01), POLL_S))
            if done:
                result: CompressionResult = job.done.result()
                if result.failure_class == "pool":
                    self.failed += 1
                    return failed_pass(engine, job.view, ctx, "other", result.error or "")
                return result

    def _replace(self, worker: _Worker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
            worker.stop()  # its reader thread reports the loss, which fails its other passes
            if not self._closing:
                self._workers.append(self._spawn())

    # -- what workers send (on the loop, called by their reader threads) --------------------

    def _received(self, worker: _Worker, data: bytes) -> None:
        message = pickle.loads(data)
        kind, job_id = message[0], message[1]
        job = self._jobs.get(job_id)
        if kind == "summary":
            assert self._loop is not None
            self._loop.create_task(self._summarize(worker, job, job_id, message[2], message[3]))
        elif job is not None and not job.done.done():
            if kind == "value":
                job.done.set_result(message[2])
            elif kind == "done":
                result, encoded = message[2], message[3]
                messages = [job.view[m] if isinstance(m, int) else m for m in encoded]
                job.done.set_result(replace(result, messages=messages))
            else:
                job.done.set_result(_broken(job.view, str(message[2])))

    def _lost(self, worker: _Worker) -> None:
        for job_id in list(worker.jobs):
            job = self._jobs.get(job_id)
            if job is not None and not job.done.done():
                job.done.set_result(_broken(job.view, "the pool's worker process exited"))
        if worker in self._workers and not self._closing:
            log.error("a pool worker exited (code %s); starting another", worker.process.exitcode)
            self._workers.remove(worker)
            self._workers.append(self._spawn())

    async def _summarize(
        self, worker: _Worker, job: _Job | None, job_id: int, call_id: int, call: SummaryCall
    ) -> None:
        answer: tuple[Any, ...]
        if job is None or job.summarize is None:
            answer = ("error", "the pass this summary was for is gone", None, False, False)
        else:
            job.summarizing += 1
            started = time.perf_counter()
            try:
                answer = ("ok", await job.summarize(call))
            except SummaryCallError as error:
                answer = ("error", str(error), error.status, error.timeout, error.network)
            except Exception as error:  # foreign code at the I/O edge, as in the engine
                answer = ("error", f"{type(error).__name__}: {error}", None, False, False)
            finally:
                job.summarizing -= 1
                job.waited_s += time.perf_counter() - started
        data = pickle.dumps(("reply", job_id, call_id, answer), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            await asyncio.to_thread(worker.send, data)
        except OSError:
            pass  # the worker is gone; its passes are answered by `_lost`


def _broken(view: Sequence[Message], why: str) -> CompressionResult:
    """A worker's failure, marked for `_outcome` (which knows the engine and context)."""
    return CompressionResult(
        list(view), "aborted", EngineState(), 0, 0, error=why, failure_class="pool"
    )


def failed_pass(
    engine: ContextEngine, view: Sequence[Message], ctx: CompressionContext, kind: str, why: str
) -> CompressionResult:
    """A pass the pool could not finish, answered as a summary failure of class `kind`: the
    view unchanged, the class's cooldown started."""
    options = getattr(engine, "options", None)
    cooldowns = options.cooldowns if isinstance(options, CompressorOptions) else {}
    streak = ctx.state.failure_streak.get(kind, 0) + 1
    state = with_failure(ctx.state, kind, cooldown_seconds(kind, streak, cooldowns), ctx.now)
    figure = ctx.current_tokens or 0
    return CompressionResult(
        messages=list(view),
        outcome="aborted",
        state=state,
        tokens_before=figure,
        tokens_after=figure,
        error=f"compression pool: {why}",
        failure_class=kind,
    )


# -- the worker's side ------------------------------------------------------------------------


def serve(conn: Connection) -> None:
    """A worker process's main: passes in, results out, until the pipe closes."""
    asyncio.run(_Service(conn).run())


class _Service:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.calls = itertools.count(1)
        self.replies: dict[int, asyncio.Future[tuple[Any, ...]]] = {}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[bytes | None] = asyncio.Queue()

        def read() -> None:
            while True:
                try:
                    data: bytes | None = self.conn.recv_bytes()
                except (EOFError, OSError):
                    data = None
                loop.call_soon_threadsafe(inbox.put_nowait, data)
                if data is None:
                    return

        threading.Thread(target=read, daemon=True).start()
        tasks: set[asyncio.Task[None]] = set()
        while (data := await inbox.get()) is not None:
            message = pickle.loads(data)
            if message[0] == "warm":
                continue  # unpickling built the counters; nothing else to do
            if message[0] == "call":
                self.call(*message[1:])
                continue
            if message[0] == "job":
                task = loop.create_task(self.job(*message[1:]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:
                waiting = self.replies.pop(message[2], None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(message[3])

    def send(self, message: tuple[Any, ...]) -> None:
        self.conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def call(self, job_id: int, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            value = function(*args)
        except Exception as error:  # reported, never a dead worker
            self.send(("failed", job_id, f"{type(error).__name__}: {error}"))
            return
        self.send(("value", job_id, value))

    async def job(
        self,
        job_id: int,
        engine: ContextEngine,
        view: list[Message],
        ctx: CompressionContext,
        summarizes: bool,
    ) -> None:
        if summarizes:
            ctx = replace(ctx, summarize=self.summarizer(job_id))
        try:
            result = await engine.compress(view, ctx)
        except Exception as error:  # reported, never a dead worker
            self.send(("failed", job_id, f"{type(error).__name__}: {error}"))
            return
        at = {id(message): i for i, message in enumerate(view)}
        encoded = [at.get(id(message), message) for message in result.messages]
        self.send(("done", job_id, replace(result, messages=[]), encoded))

    def summarizer(self, job_id: int) -> Summarizer:
        async def summarize(call: SummaryCall) -> SummaryReply:
            call_id = next(self.calls)
            waiting = asyncio.get_running_loop().create_future()
            self.replies[call_id] = waiting
            try:
                self.send(("summary", job_id, call_id, call))
                answer = await waiting
            finally:
                self.replies.pop(call_id, None)
            if answer[0] == "ok":
                reply: SummaryReply = answer[1]
                return reply
            _, text, status, timeout, network = answer
            raise SummaryCallError(text, status=status, timeout=timeout, network=network)

        return summarize
