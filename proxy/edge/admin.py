"""The admin API (behind `auth.admin_key`) and, mounted with it, the dashboard.

    GET    /admin/sessions?limit=&offset=&order=last_activity|tokens&scope=
    GET    /admin/savings                           tokens and money saved, shadow agreement
    GET    /admin/sessions/{scope}/{key}            session, limits, events, checkpoints, usage
    GET    /admin/sessions/{scope}/{key}/archive    the originals compressions replaced
    GET    /admin/sessions/{scope}/{key}/audit      replaced positions against archived ones
    GET    /admin/sessions/{scope}/{key}/activity   background compression: idle|pending|running
    POST   /admin/sessions/{scope}/{key}/compress   {"focus": "..."} optional
    PUT    /admin/sessions/{scope}/{key}/compression  {"enabled": false} switches it off
    DELETE /admin/sessions/{scope}/{key}            with its checkpoints, archive and events

Session ids come from clients (`X-Session-Id`) and may contain "/", so `key` is a path
parameter; the `/archive`, `/audit`, `/activity` and `/compress` routes are declared first and
win for keys that end that way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field
from starlette.responses import Response

from compression import EngineState
from proxy.edge.dashboard import router as dashboard_router
from proxy.edge.services import Services
from proxy.http_errors import invalid_request
from session.compaction import manual_answer
from session.errors import NotFound
from session.ledger.savings import Tally, charge_json, per_session, savings_json, tally
from session.provenance import replaced_positions
from storage import (
    PROMPT_TOKENS_PENDING,
    ArchiveFacts,
    SessionDetail,
    SessionKey,
    SessionRecord,
)
from storage.rows.charges import ChargeGroup, ShadowGroup

MAX_PAGE = 500

# Documents the scheme in the OpenAPI schema; AdminRoute does the checking.
_bearer = HTTPBearer(auto_error=False, description="auth.admin_key from the ctxgate config")


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


class AdminRoute(APIRoute):
    """Checks the admin key before anything else (even body parsing) and reports invalid
    parameters as BadRequest, so every admin answer is the OpenAI error envelope."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def admin_handler(request: Request) -> Response:
            _services(request).auth.check_admin(request.headers)
            try:
                return await handler(request)
            except RequestValidationError as exc:
                raise invalid_request(exc) from None

        return admin_handler


router = APIRouter()
api = APIRouter(
    prefix="/admin",
    tags=["admin"],
    route_class=AdminRoute,
    dependencies=[Security(_bearer)],
)


class CompressionBody(BaseModel):
    enabled: bool = Field(
        description="false: the session's requests are relayed as their client sends them."
    )


class CompressBody(BaseModel):
    focus: str | None = Field(None, description="A topic the summary should keep in detail.")


def json_response(payload: Any, status_code: int = 200) -> Response:
    # orjson: several times faster than json for the large usage and archive lists.
    return Response(orjson.dumps(payload), status_code=status_code, media_type="application/json")


def session_json(record: SessionRecord) -> dict[str, Any]:
    """A session row for JSON; the pending sentinel becomes null plus a flag."""
    data = dataclasses.asdict(record)
    data.pop("engine_state")
    pending = record.last_prompt_tokens == PROMPT_TOKENS_PENDING
    data["last_prompt_tokens"] = None if pending else record.last_prompt_tokens
    data["last_prompt_tokens_pending"] = pending
    return data


def limits_json(services: Services, model: str) -> dict[str, Any] | None:
    """The figures the proxy's triggers use for `model` (None: no model rule matches it)."""
    rule = services.settings.rule_for(model)
    if rule is None:
        return None
    learned = services.models.windows.get(model)
    context_length = services.models.context_length(rule, model)
    limits = services.models.limits(context_length, rule.max_output_tokens)
    return {
        "configured_context_length": rule.context_length,
        "learned_context_length": learned,
        "max_output_tokens": rule.max_output_tokens,
        **dataclasses.asdict(limits),
    }


def latest_summary(detail: SessionDetail) -> str | None:
    """The newest checkpoint's summary, else the engine's remembered one."""
    for checkpoint in reversed(detail.checkpoints):
        if checkpoint.summary:
            return checkpoint.summary
    return EngineState.from_json(detail.session.engine_state).previous_summary


def detail_json(services: Services, detail: SessionDetail) -> dict[str, Any]:
    state = EngineState.from_json(detail.session.engine_state)
    return {
        "session": session_json(detail.session),
        "limits": limits_json(services, detail.session.model),
        # previous_summary is served once, as `summary`.
        "engine_state": {k: v for k, v in state.to_json().items() if k != "previous_summary"},
        "summary": latest_summary(detail),
        "events": [dataclasses.asdict(e) for e in detail.events],
        "checkpoints": [dataclasses.asdict(c) for c in detail.checkpoints],
        "usage": [dataclasses.asdict(u) for u in detail.usage],
        "archived_count": detail.archived_count,
    }


def unknown(sk: SessionKey) -> NotFound:
    return NotFound(f"No session '{sk.key}' in scope '{sk.scope}'.", code="session_not_found")


async def require_session(services: Services, sk: SessionKey) -> None:
    if await services.store.get_session(sk) is None:
        raise unknown(sk)


@api.get("/sessions", summary="List sessions, newest activity or most tokens first")
async def list_sessions(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    order: Literal["last_activity", "tokens"] = "last_activity",
    scope: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> Response:
    store = _services(request).store
    # One row more than asked tells whether another page exists without a COUNT query.
    rows = await store.list_sessions(scope=scope, limit=limit + 1, offset=offset, order=order)
    keys = [SessionKey(r.scope, r.key) for r in rows[:limit]]
    groups = await store.charge_groups(keys, per_session=True)
    tallies = per_session(groups, _services(request).settings.price_for)
    off = await store.compression_off([r.root for r in rows[:limit]])
    return json_response(
        {
            "object": "list",
            "data": [
                session_json(r)
                | {
                    "savings": _session_savings(tallies.get((r.scope, r.key))),
                    "compression": _switch(r.root in off),
                }
                for r in rows[:limit]
            ],
            "limit": limit,
            "offset": offset,
            "order": order,
            "has_more": len(rows) > limit,
        }
    )


def _session_savings(tally: Tally | None) -> dict[str, object] | None:
    return None if tally is None else tally.as_json()


def shadow_json(groups: list[ShadowGroup], charges: list[ChargeGroup]) -> dict[str, object]:
    """Shadow agreement per model (and per trigger within it) and overall.

    `tokens` is what the shadow calls were billed (their charges), checks that stopped
    half-way included; `checked_tokens` is the share of the completed checks, the samples
    the agreement figures count."""
    spent: dict[str, int] = {}
    for c in charges:
        if c.kind == "shadow":
            used = c.uncached + c.cache_read + c.cache_write + c.output
            spent[c.model] = spent.get(c.model, 0) + used
    models: dict[str, dict[str, Any]] = {}
    for g in groups:
        entry = models.setdefault(g.model, {"triggers": {}})
        entry["triggers"][g.trigger] = _agreement(
            g.samples, g.agreements, g.noise_agreements, g.tokens
        )
    for model in spent:
        models.setdefault(model, {"triggers": {}})
    for model, entry in models.items():
        rows = [g for g in groups if g.model == model]
        entry.update(_agreement(*(sum(getattr(g, f) for g in rows) for f in _SHADOW_SUMS)))
        entry["tokens"] = spent.get(model, 0)
    total = _agreement(*(sum(getattr(g, f) for g in groups) for f in _SHADOW_SUMS))
    total["tokens"] = sum(spent.values())
    return {"object": "shadow_checks", "total": total, "models": dict(sorted(models.items()))}


_SHADOW_SUMS = ("samples", "agreements", "noise_agreements", "tokens")


def _agreement(samples: int, agreements: int, noise: int, tokens: int) -> dict[str, Any]:
    return {
        "samples": samples,
        "agreement": agreements / samples if samples else None,
        "noise_floor_agreement": noise / samples if samples else None,
        "checked_tokens": tokens,
    }


@api.get("/savings", summary="Tokens and money saved, per model and overall; shadow agreement")
async def savings(request: Request) -> Response:
    services = _services(request)
    groups = await services.store.charge_groups()
    shadow = await services.store.shadow_groups()
    return json_response(
        savings_json(groups, services.settings.price_for) | {"shadow": shadow_json(shadow, groups)}
    )


@api.get("/sessions/{scope}/{key:path}/archive", summary="Original messages compressions replaced")
async def session_archive(scope: str, key: str, request: Request) -> Response:
    services = _services(request)
    sk = SessionKey(scope, key)
    await require_session(services, sk)
    archived = await services.store.archived_messages(sk)
    return json_response(
        {
            "object": "list",
            "scope": scope,
            "key": key,
            "data": [dataclasses.asdict(a) for a in archived],
        }
    )


@api.get(
    "/sessions/{scope}/{key:path}/activity",
    summary="Whether a background compression of the session is pending or running",
)
async def session_activity(scope: str, key: str, request: Request) -> Response:
    """This process's own view, read without the database (cheap enough to poll): a client
    that waits for `idle` before its next request sees what a compression left behind."""
    activity = _services(request).sessions.activity(SessionKey(scope, key))
    return json_response(
        {"object": "session_activity", "scope": scope, "key": key, "background": activity}
    )


@api.get("/sessions/{scope}/{key:path}/audit", summary="Is every replaced original archived?")
async def session_audit(scope: str, key: str, request: Request) -> Response:
    services = _services(request)
    sk = SessionKey(scope, key)
    facts = await services.store.archive_facts(sk)
    if facts is None:
        raise unknown(sk)
    return json_response({"scope": scope, "key": key, **audit_json(facts)})


def audit_json(facts: ArchiveFacts) -> dict[str, Any]:
    """The client positions the newest checkpoint replaces, and which of them are archived.

    `missing` is what a compression removed that no archive row holds; it is null when the
    checkpoint predates recorded sources (its kept positions are unknown).
    """
    archived = set(facts.archived)
    if facts.sources is None:
        replaced = None
        missing = None
    else:
        replaced = replaced_positions(facts.prefix_len, facts.sources)
        missing = [p for p in replaced if p not in archived]
    return {
        "object": "archive_audit",
        "checkpoint_id": facts.checkpoint_id,
        "prefix_len": facts.prefix_len,
        "replaced": replaced,
        "archived": list(facts.archived),
        "missing": missing,
        "complete": None if missing is None else not missing,
    }


@api.post("/sessions/{scope}/{key:path}/compress", summary="Compress a session now")
async def compress_session(
    scope: str, key: str, request: Request, body: CompressBody | None = None
) -> Response:
    services = _services(request)
    sk = SessionKey(scope, key)
    await require_session(services, sk)
    done = await services.conversations.compress_now(sk, body.focus if body else None)
    if done is None:
        raise unknown(sk)
    status, current, answer = manual_answer(done)
    return json_response({"scope": scope, "key": current.key, **answer}, status)


@api.put(
    "/sessions/{scope}/{key:path}/compression",
    summary="Switch compression off (or back on) for one session",
)
async def session_compression(
    scope: str, key: str, body: CompressionBody, request: Request
) -> Response:
    """Stored with the session (its client's session id), so it holds for its later requests
    on every replica; a session not seen yet may be switched before its first request."""
    services = _services(request)
    record = await services.store.get_session(SessionKey(scope, key))
    # Requests read the switch under the client's session id: a rotation's or a fork's key
    # names the session it belongs to.
    sk = record.root if record is not None else SessionKey(scope, key)
    await services.gateway.switches.set(sk, not body.enabled)
    return json_response(
        {
            "scope": scope,
            "key": sk.key,
            "compression": _switch(not body.enabled),
            "known": record is not None,
        }
    )


def _switch(off: bool) -> str:
    return "off" if off else "on"


@api.get("/sessions/{scope}/{key:path}", summary="A session with its events and usage")
async def session_detail(scope: str, key: str, request: Request) -> Response:
    services = _services(request)
    sk = SessionKey(scope, key)
    detail = await services.store.session_detail(sk)
    if detail is None:
        raise unknown(sk)
    groups = await services.store.charge_groups([sk])
    shadow = await services.store.shadow_groups(sk)
    price_for = services.settings.price_for
    charges = await services.store.charges_of(sk)
    off = await services.store.compression_off([detail.session.root])
    return json_response(
        detail_json(services, detail)
        | {
            "compression": _switch(bool(off)),
            "savings": tally(groups, price_for).as_json() if groups else None,
            "charges": [charge_json(c, price_for(c.model)) for c in charges],
            "shadow": shadow_json(shadow, groups),
        }
    )


@api.delete("/sessions/{scope}/{key:path}", summary="Delete a session with all it holds")
async def delete_session(scope: str, key: str, request: Request) -> Response:
    services = _services(request)
    sk = SessionKey(scope, key)
    # First: a running background job or the remembered last view could bring it back.
    services.sessions.forget(sk)
    if services.conversations.ledger is not None:
        services.conversations.ledger.forget(sk)
    keep = services.settings.storage.retention.keep_daily_usage  # totals survive it
    if not await services.store.delete_session(sk, keep_totals=keep):
        raise unknown(sk)
    return json_response({"scope": scope, "key": key, "deleted": True})


router.include_router(api)
router.include_router(dashboard_router)
