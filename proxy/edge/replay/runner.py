"""Replaying recordings through the services `serve` runs on, over the upstream double.

The services are built as `serve` builds them (store, conversations, compactor, ledger,
gateway), on a SQLite database of their own, with one upstream: the double. Each request of a
session goes through the gateway as the app hands it over, the answer's bookkeeping runs as
after a real answer, and the session's background compression is awaited before the next
request, as an agent's tool run would give it time to finish.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from compression import (
    FileOp,
    Message,
    TokenCounter,
    content_text,
    counter_for_model,
    file_ops,
)
from proxy.doors.gemini.gemini_door import GeminiDoor
from proxy.doors.registry import APIS, BY_API, Door
from proxy.edge.replay.double import FALLBACK_HOST, PROVIDER_HOST, UpstreamDouble
from proxy.edge.replay.figures import RequestFigures, SessionFigures, answered_edits
from proxy.edge.replay.meter import Lane, Meter
from proxy.edge.replay.readers.recording import Recording
from proxy.edge.services import Services, start_services
from proxy.provider.transport import new_http_transport
from session.config.reader import SettingsError
from session.config.settings import AuthSettings, ModelRule, Settings, UpstreamSettings
from session.errors import ProxyError
from session.identity import scope_for
from session.ledger.tiers import Split
from storage import SessionKey

REPLAY = "ctxgate-replay"
FALLBACK = "ctxgate-replay-summary"
CREDENTIAL = "ctxgate-replay"
DEFAULT_WINDOW = 128_000
# Published windows of common models, for a replay that names none (the model's own window).
WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gemini-", 1_048_576),
)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    window: int | None = None  # None: each model's own
    summary_model: str | None = None  # None: the config's, else the fallback summary
    db_url: str | None = None  # None: a SQLite file in a temporary folder
    configured: bool = False  # the settings came from a config file (its windows count)


def window_for(settings: Settings, options: ReplayOptions, model: str) -> int:
    if options.window is not None:
        return options.window
    rule = settings.rule_for(model) if options.configured else None
    if rule is not None:
        return rule.context_length
    return next((w for prefix, w in WINDOWS if model.startswith(prefix)), DEFAULT_WINDOW)


def replay_settings(base: Settings, options: ReplayOptions, models: Sequence[str]) -> Settings:
    """`base` with the double as the only provider, each model at its window, the summary
    model configured (else the fallback host), shadow checks and retention off."""
    upstreams = dict(base.upstreams)
    upstreams[REPLAY] = UpstreamSettings(
        REPLAY, f"http://{PROVIDER_HOST}/v1", api_key=CREDENTIAL, apis=APIS
    )
    summary = base.compression.summary
    wanted = options.summary_model or (summary.model if options.configured else "auto")
    if wanted and wanted != "auto":
        rule = base.rule_for(wanted)
        upstream = summary.upstream if summary.upstream != "auto" else rule and rule.upstream
        if not upstream or upstream not in base.upstreams:
            raise SettingsError(f"no upstream in the config serves the summary model '{wanted}'")
        summary = replace(summary, model=wanted, upstream=upstream)
    else:
        upstreams[FALLBACK] = UpstreamSettings(
            FALLBACK, f"http://{FALLBACK_HOST}/v1", api_key=CREDENTIAL, apis=("chat",)
        )
        summary = replace(summary, model="auto", upstream=FALLBACK)
    rules = tuple(
        ModelRule(_literal(m), REPLAY, window_for(base, options, m)) for m in dict.fromkeys(models)
    )
    c = base.compression
    storage = replace(
        base.storage,
        url=options.db_url or base.storage.url,
        retention=replace(base.storage.retention, session_idle_days=0),
    )
    return replace(
        base,
        upstreams=upstreams,
        models=(*rules, ModelRule("*", REPLAY, window_for(base, options, ""))),
        compression=replace(c, summary=summary, shadow=replace(c.shadow, enabled=False)),
        storage=storage,
        auth=AuthSettings(),
    )


def _literal(model: str) -> str:
    """A glob matching exactly `model`."""
    return "".join(f"[{ch}]" if ch in "*?[]" else ch for ch in model)


async def replay_all(
    base: Settings,
    recordings: Sequence[Recording],
    options: ReplayOptions,
    progress: Progress | None = None,
) -> list[SessionFigures]:
    if options.db_url is None:
        with tempfile.TemporaryDirectory(prefix="ctxgate-replay-") as folder:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'replay.db'}"
            return await replay_all(base, recordings, replace(options, db_url=url), progress)
    settings = replay_settings(base, options, [r.model for r in recordings])
    counters: dict[str, TokenCounter] = {}

    def counter_for(model: str) -> TokenCounter:
        if model not in counters:
            rule = settings.rule_for(model)
            counters[model] = counter_for_model(
                model,
                encoding=rule.encoding if rule else None,
                encodings_dir=settings.tokens.encodings_dir,
            )
        return counters[model]

    summary_upstream = settings.compression.summary.upstream
    onward = None
    if summary_upstream != FALLBACK:
        onward = new_http_transport(settings.server.upstream_client)
    double = UpstreamDouble(Meter(counter_for), onward)
    services = await start_services(settings, http_transport=double)
    try:
        return [
            await _session(services, double, settings, recording, progress)
            for recording in recordings
        ]
    finally:
        await services.close()
        await double.aclose()


def door_of(recording: Recording) -> Door:
    if recording.api == "gemini":
        return GeminiDoor.at(recording.model, stream=False)
    return BY_API[recording.api]


async def _session(
    services: Services,
    double: UpstreamDouble,
    settings: Settings,
    recording: Recording,
    progress: Progress | None,
) -> SessionFigures:
    started = time.monotonic()
    rule = settings.rule_for(recording.model)
    figures = SessionFigures(
        recording.name,
        recording.source,
        recording.api,
        recording.model,
        rule.context_length if rule else DEFAULT_WINDOW,
        settings.price_for(recording.model),
    )
    door = door_of(recording)
    session_id = f"replay-{uuid.uuid4().hex[:12]}"
    headers = {
        "authorization": f"Bearer {CREDENTIAL}",
        "x-session-id": session_id,
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",  # what Anthropic's clients send; others ignore it
    }
    bodies = recording.bodies
    final = door.parse(orjson.dumps(bodies[-1])).messages if bodies else []
    ops = file_ops(final)
    direct = Lane()
    double.begin(Lane())
    previous: tuple[int, str] | None = None  # the previous request's end and forwarded text
    for n, body in enumerate(bodies):
        raw = orjson.dumps(body)  # one at a time: a long session's requests add up to GBs
        sent = double.meter.measure(door, raw, direct)
        end = len(sent.request.messages)
        if previous is not None:
            _count_edits(figures, ops, final, previous, end)
        error = await _serve(services, door, headers, raw)
        await _settle(services)
        mine = double.take()
        view = mine[-1].request.messages if mine and error is None else []
        shown = "\n".join(content_text(m) for m in view)
        users = _user_texts(sent.request.messages)
        figures.requests.append(
            RequestFigures(
                sent.prompt,
                mine[-1].prompt if view else None,
                sent.split,
                sum((m.split for m in mine), Split()),
                len(users),
                sum(1 for u in users if u in shown),
                error,
            )
        )
        previous = (end, shown)
        if progress is not None:
            progress(recording.name, n + 1, len(bodies))
    figures.summaries = list(double.summaries)
    figures.compressions = await _events(services, headers, session_id)
    figures.seconds = time.monotonic() - started
    return figures


def _count_edits(
    figures: SessionFigures,
    ops: list[FileOp],
    final: list[Message],
    previous: tuple[int, str],
    end: int,
) -> None:
    """Count the edits the model answered the previous request with: was the newest read of
    each edited file in what ctxgate forwarded in that request?"""
    for _edit, read in answered_edits(ops, previous[0], end):
        text = content_text(final[read.result]) if read.result is not None else ""
        if text.strip():
            figures.edits += 1
            figures.edits_kept += text in previous[1]


async def _serve(services: Services, door: Door, headers: dict[str, str], raw: bytes) -> str | None:
    """Send one request through the gateway as the app would; the error it answered, if any."""
    try:
        response = await services.gateway.serve(door, headers, raw)
    except ProxyError as exc:
        return exc.message
    if response.background is not None:
        await response.background()
    if response.status_code >= 400:
        return bytes(response.body).decode("utf-8", "replace")[:300]
    return None


async def _settle(services: Services) -> None:
    """Wait for every background compression started so far."""
    while services.sessions.jobs:
        await asyncio.gather(*list(services.sessions.jobs.values()), return_exceptions=True)


async def _events(
    services: Services, headers: dict[str, str], session_id: str
) -> list[tuple[str, str]]:
    key = SessionKey(scope_for(services.auth.client_credential(headers)), session_id)
    await services.store.flush()
    detail = await services.store.session_detail(key)
    return [] if detail is None else [(e.trigger, e.outcome) for e in detail.events]


def _user_texts(messages: Sequence[Message]) -> list[str]:
    texts = [content_text(m) for m in messages if m.get("role") == "user"]
    return [t for t in texts if t.strip()]
