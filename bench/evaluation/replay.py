"""Replay a session through a real ctxgate in front of the provider simulator.

At every request point of the original transcript the client sends its history so far with the
official OpenAI SDK (X-Session-Id set); the simulator's answer is discarded and the ORIGINAL
assistant message is appended instead, so the client's history is the real one and only
ctxgate's forwarded view differs from it.

Added latency is paired per turn: the time ctxgate took (request sent -> response headers,
timed by httpx event hooks so SDK serialisation is excluded) minus the time a twin simulator
took for the very bytes ctxgate forwarded.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.evaluation.corpus import Message, Session
from bench.evaluation.needles import needle_key
from bench.evaluation.recall import ProbeOutcome, ask_probes
from bench.evaluation.recoverable import fetch_archive
from bench.evaluation.search_hits import identifiers, search_hits
from bench.evaluation.waiting import AWAIT_TIMEOUT_S, CompressionWaiter, Wait
from session.identity import scope_for
from storage import SessionKey
from tests.servers import ProxyServer, settings_for
from tests.simulator import (
    Fail,
    ModelSpec,
    Received,
    Reply,
    Simulator,
    build_summary,
    count_text,
    is_summary_request,
    requested_max_tokens,
)
from tests.simulator.recall_model import RecallModel

MODEL = "gpt-4o"  # o200k_base on both sides: ctxgate's estimate and the simulator's count agree
CLIENT_KEY = "sk-eval-client"
ADMIN_KEY = "sk-eval-admin"
SETTLE_S = 0.3  # quiet time after the last turn before background work counts as finished
SETTLE_MAX_S = 15.0

Progress = Callable[[int, int], None]
Responder = Callable[[dict[str, Any]], Reply | Fail | None]


@dataclass
class Turn:
    end: int  # prefix length the client sent
    seconds: float | None  # through ctxgate: request written -> response headers
    direct_seconds: float | None  # the forwarded bytes sent straight to a twin simulator
    forwarded: Received | None  # the ordinary request ctxgate forwarded and got answered
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    overflow: bool = False  # the client itself received a context-overflow error
    wait: Wait | None = None  # before the next turn, for the session's background compression

    @property
    def added_ms(self) -> float | None:
        if self.seconds is None or self.direct_seconds is None:
            return None
        return (self.seconds - self.direct_seconds) * 1000

    @property
    def sync_compression(self) -> bool:
        return "x-ctxgate-trigger" in self.headers


@dataclass
class Replay:
    session: str
    background: bool
    summarizer: str
    turns: list[Turn]
    requests: list[Received]  # every chat request the simulator received (summaries included)
    events: list[tuple[str, str]]  # (trigger, outcome) of the compression events ctxgate stored
    seconds: float
    archive: dict[int, Message] = field(default_factory=dict)  # admin API, after the last turn
    probes: list[ProbeOutcome] = field(default_factory=list)
    # archive searches for identifiers followed by ":" or "." that found them (hits, searches)
    search_hits: tuple[int, int] = (0, 0)
    search_missed: list[str] = field(default_factory=list)
    savings: dict[str, Any] | None = None  # GET /admin/savings after the last turn (shadow runs)
    awaited: bool = False  # each turn waited for the background compression before it
    probe_waits: list[Wait] = field(default_factory=list)  # before each planted-fact question

    @property
    def waits(self) -> list[Wait]:
        return [t.wait for t in self.turns if t.wait is not None] + self.probe_waits


class _Stopwatch:
    """httpx event hooks: the request hook runs once the body is built, the response hook on
    the response headers — the span excludes client-side JSON encoding."""

    def __init__(self) -> None:
        self.sent = 0.0
        self.answered = 0.0

    def _request(self, request: httpx.Request) -> None:
        self.sent = time.perf_counter()

    def _response(self, response: httpx.Response) -> None:
        self.answered = time.perf_counter()

    def client(self) -> httpx.Client:
        hooks: dict[str, list[Callable[..., Any]]] = {
            "request": [self._request],
            "response": [self._response],
        }
        return httpx.Client(event_hooks=hooks, timeout=120)

    def elapsed(self) -> float:
        return self.answered - self.sent


SUMMARIZERS = ("fit", "stub", "fail")


def _fit_summary(body: dict[str, Any]) -> Reply:
    """The simulator's deterministic summary, cut at a line boundary to the requested output
    limit: a summary model that respects its budget."""
    text = build_summary(body)
    limit = requested_max_tokens(body)
    while limit is not None and count_text(text) > limit and "\n" in text.rstrip("\n"):
        text = text.rstrip("\n").rsplit("\n", 1)[0] + "\n"
    return Reply(content=text, finish_reason="stop")


def _responder(summarizer: str) -> Callable[[dict[str, Any]], Reply | Fail | None]:
    """Ordinary replies are discarded by the replay, so they are instant and constant.

    Summary requests: `fit` (default) a budget-respecting summary; `stub` the simulator's own
    summarizer, which overruns long inputs and answers `finish_reason: length`; `fail` a 500,
    so ctxgate falls back to its deterministic summary.
    """

    def respond(body: dict[str, Any]) -> Reply | Fail | None:
        if not is_summary_request(body):
            return Reply(content="ok")
        if summarizer == "fail":
            return Fail(500)
        return _fit_summary(body) if summarizer == "fit" else None

    return respond


def simulator_for(
    window: int, summarizer: str, responder: Responder | None = None, recall_calls: int = 4
) -> Simulator:
    """Ordinary turns and summaries as `responder` (default `_responder`) says; planted-fact
    questions answered by the recall model (from the view, else through ctxgate's recall tool,
    at most `recall_calls` calls a question: 0 is a model that answers from its view only)."""
    sim = Simulator(models={MODEL: ModelSpec(window=window)}, validate_messages=True)
    other = responder or _responder(summarizer)
    sim.responder = RecallModel(other=other, max_calls=recall_calls)
    return sim


def _is_overflow(exc: openai.APIStatusError) -> bool:
    text = str(exc).lower()
    return exc.status_code in (400, 413, 422) and ("context" in text or "too long" in text)


@dataclass
class _Driver:
    session: Session
    client: openai.OpenAI
    watch: _Stopwatch
    session_id: str
    direct: httpx.Client | None
    direct_url: str
    direct_watch: _Stopwatch

    def ask(self, end: int) -> Turn:
        # The history goes in `extra_body` (merged into the JSON as is): the SDK's recursive
        # TypedDict transform of `messages` costs ~0.2 s per turn on a 40K-token history and
        # would dominate the run; the bytes on the wire are the same.
        body: dict[str, Any] = {"messages": self.session.messages[:end]}
        if self.session.tools:
            body["tools"] = self.session.tools
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "messages": [],
            "extra_body": body,
            "extra_headers": {"X-Session-Id": self.session_id},
        }
        try:
            raw = self.client.chat.completions.with_raw_response.create(**kwargs)
        except openai.APIStatusError as exc:
            return Turn(
                end,
                None,
                None,
                None,
                error=f"{exc.status_code}: {exc}"[:500],
                overflow=_is_overflow(exc),
            )
        except openai.APIError as exc:
            return Turn(end, None, None, None, error=f"{type(exc).__name__}: {exc}"[:500])
        headers = {k: v for k, v in raw.headers.items() if k.startswith("x-ctxgate-")}
        return Turn(end, self.watch.elapsed(), None, None, headers)

    def time_direct(self, forwarded: Received) -> float | None:
        if self.direct is None:
            return None
        answer = self.direct.post(
            self.direct_url,
            content=forwarded.raw,
            headers={"content-type": "application/json", "authorization": "Bearer sk-direct"},
        )
        return self.direct_watch.elapsed() if answer.status_code == 200 else None


def _forwarded(new: list[Received]) -> Received | None:
    answered = [r for r in new if r.is_chat and not r.is_summary and r.status == 200]
    return answered[-1] if answered else None


def _settle(sim: Simulator) -> None:
    """Wait until background compression stops talking to the simulator (bounded)."""
    deadline = time.monotonic() + SETTLE_MAX_S
    seen = len(sim.received)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = len(sim.received)
        if now != seen:
            seen, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_S:
            return


def stored_events(proxy: ProxyServer, session_id: str) -> list[tuple[str, str, str | None]]:
    """(trigger, outcome, error) of every compression event ctxgate stored for the session."""
    key = SessionKey(scope_for(CLIENT_KEY), session_id)
    detail = proxy.run(proxy.services.store.session_detail(key))
    return [] if detail is None else [(e.trigger, e.outcome, e.error) for e in detail.events]


def replay(
    session: Session,
    *,
    background: bool = True,
    summarizer: str = "fit",
    options: dict[str, Any] | None = None,
    measure_direct: bool = True,
    gap_s: float = 0.0,
    progress: Progress | None = None,
    probe: bool = True,
    responder: Responder | None = None,
    shadow: dict[str, Any] | None = None,
    recall_calls: int = 4,
    await_compression: bool = True,
    await_timeout_s: float = AWAIT_TIMEOUT_S,
    ahead: bool = True,
) -> Replay:
    """Send every request point of `session` through a fresh ctxgate; record what it did.

    `await_compression`: before each next turn (after the `gap_s` pause), wait until the
    session has no background compression pending or running (at most `await_timeout_s`),
    as a real agent's seconds-long turns let it land; off, turns follow `gap_s` apart only."""
    started = time.monotonic()
    session_id = f"eval-{session.name}-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxgate-eval-")))
        sim = stack.enter_context(
            simulator_for(session.window, summarizer, responder, recall_calls)
        )
        twin = (
            stack.enter_context(simulator_for(session.window, summarizer))
            if measure_direct
            else None
        )
        models = [{"match": "*", "upstream": "sim", "context_length": session.window}]
        settings = settings_for(
            sim.base_url,
            str(folder / "ctxgate.db"),
            models=models,
            compression={
                "background": background,
                "options": options or {},
                "recall": {"ahead": ahead},
                **({"shadow": shadow} if shadow else {}),
            },
            auth={"admin_key": ADMIN_KEY},
        )
        proxy = stack.enter_context(ProxyServer(settings))
        watch, direct_watch = _Stopwatch(), _Stopwatch()
        http = stack.enter_context(watch.client())
        direct = stack.enter_context(direct_watch.client()) if twin is not None else None
        client = openai.OpenAI(
            base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, http_client=http
        )
        driver = _Driver(
            session,
            client,
            watch,
            session_id,
            direct,
            f"{twin.base_url}/chat/completions" if twin else "",
            direct_watch,
        )
        root = proxy.base_url.removesuffix("/v1")
        waiter = (
            CompressionWaiter(
                stack.enter_context(httpx.Client(timeout=30)),
                root,
                ADMIN_KEY,
                scope_for(CLIENT_KEY),
                session_id,
                await_timeout_s,
            )
            if await_compression
            else None
        )
        turns = _run_turns(driver, sim, gap_s, progress, waiter)
        _settle(sim)
        events = [(trigger, outcome) for trigger, outcome, _ in stored_events(proxy, session_id)]
        requests = [r for r in sim.received if r.is_chat]
        archive = fetch_archive(http, root, ADMIN_KEY, scope_for(CLIENT_KEY), session_id)
        codes = [n.code for n in session.needles if n.index < session.points()[-1]]
        hits, missed = search_hits(
            settings.storage.url,
            SessionKey(scope_for(CLIENT_KEY), session_id),
            identifiers(archive, [c for c in codes if any(c in str(m) for m in archive.values())]),
        )
        probe_waits: list[Wait] = []
        probes = _probe(driver, sim, waiter, probe_waits) if probe else []
        savings = _savings(http, root) if shadow else None
    return Replay(
        session.name,
        background,
        summarizer,
        turns,
        requests,
        events,
        time.monotonic() - started,
        archive,
        probes,
        hits,
        missed,
        savings,
        await_compression,
        probe_waits,
    )


def _savings(http: httpx.Client, root: str) -> dict[str, Any]:
    answer = http.get(f"{root}/admin/savings", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()
    return data


def _probe(
    driver: _Driver, sim: Simulator, waiter: CompressionWaiter | None, waits: list[Wait]
) -> list[ProbeOutcome]:
    """Ask about every planted fact after the session's end (transcripts are cut after their
    last complete exchange, so every tool call there is answered)."""
    session = driver.session
    end = session.points()[-1]
    history = list(session.messages)
    needles = [(needle_key(n.place, n.depth), n) for n in session.needles if n.index < end]
    base: dict[str, Any] = {"model": MODEL}
    if session.tools:
        base["tools"] = session.tools
    headers = {"X-Session-Id": driver.session_id}
    pause = (lambda: waits.append(waiter.wait())) if waiter is not None else None
    return ask_probes(driver.client, lambda: sim.received, history, needles, base, headers, pause)


def _run_turns(
    driver: _Driver,
    sim: Simulator,
    gap_s: float,
    progress: Progress | None,
    waiter: CompressionWaiter | None = None,
) -> list[Turn]:
    points = driver.session.points()
    turns: list[Turn] = []
    for n, end in enumerate(points):
        before = len(sim.received)
        turn = driver.ask(end)
        turn.forwarded = _forwarded(sim.received[before:])
        if turn.forwarded is not None and turn.error is None:
            turn.direct_seconds = driver.time_direct(turn.forwarded)
        turns.append(turn)
        if progress is not None:
            progress(n + 1, len(points))
        if gap_s > 0:
            time.sleep(gap_s)  # an agent runs its tools between calls
        if waiter is not None and n + 1 < len(points):
            turn.wait = waiter.wait()
    return turns
