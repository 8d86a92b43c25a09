"""Deleting a session removes every row it has in every table of the database, keeps the
figures over all sessions as they were, and a client that reuses its id starts from nothing.

A real ctxgate with shadow checks on, an agent conversation through the OpenAI SDK long
enough to be compressed (checkpoints, archive and its search index, events, usage, charges of
requests and summaries, shadow checks), then the session deleted by `DELETE /admin/sessions`
or by the retention sweep. The database is read afterwards table by table, as its own catalog
lists them (whatever tables a later release adds), for any value naming the session.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncConnection

from session.identity import scope_for
from storage import RetentionPolicy, Sweeper
from storage.database.db import Database
from storage.database.tables import metadata
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator
from tests.storage.factories import own_database

PG_ENV = "CTXGATE_TEST_PG_URL"
ADMIN = {"Authorization": "Bearer adm"}
MODEL = "small-8k"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/ctxgate.db"
        return
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    # A database of its own: the sweep deletes whatever is idle, other tests' sessions too.
    with own_database(url, "ctxgate_deletion") as own:
        yield own


@pytest.fixture
def proxy(sim: Simulator, db_url: str) -> Iterator[ProxyServer]:
    settings = settings_for(
        sim.base_url,
        "",
        models=[{"match": "*", "upstream": "sim", "context_length": 8192}],
        compression={
            "background": False,
            "shadow": {"enabled": True, "sample_rate": 1.0, "max_tokens": 64},
        },
        storage={"url": db_url, "retention": {"session_idle_days": 0}},
        auth={"admin_key": "adm"},
        prices=[{"match": MODEL, "input": 2.0, "cached_input": 0.5, "output": 8.0}],
    )
    with ProxyServer(settings) as server:
        yield server


def admin(proxy: ProxyServer, method: str, scope: str, key: str) -> httpx.Response:
    root = proxy.base_url.removesuffix("/v1")
    url = f"{root}/admin/sessions/{scope}/{quote(key, safe='')}"
    return httpx.request(method, url, headers=ADMIN, timeout=30)


def savings(proxy: ProxyServer) -> dict[str, Any]:
    root = proxy.base_url.removesuffix("/v1")
    answer = httpx.get(f"{root}/admin/savings", headers=ADMIN, timeout=30)
    figures: dict[str, Any] = answer.json()
    return figures


def settled(proxy: ProxyServer) -> dict[str, Any]:
    """/admin/savings once the charges and shadow checks recorded after the answers are in."""
    proxy.run(proxy.services.store.flush())
    last = savings(proxy)
    for _ in range(100):
        time.sleep(0.2)
        proxy.run(proxy.services.store.flush())
        now = savings(proxy)
        if now == last:
            return now
        last = now
    raise AssertionError("the charges never settled")


def converse(sim: Simulator, proxy: ProxyServer, api_key: str, session: str) -> None:
    """An agent conversation until ctxgate compressed it, then two turns more."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=api_key, max_retries=0)
    loop = AgentLoop(client, MODEL, session_id=session)
    loop.script(sim)
    loop.past_compression()


def ask(proxy: ProxyServer, api_key: str, session: str) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "a short question"}],
        extra_headers={"X-Session-Id": session},
    )


def db(url: str, work: Any) -> Any:
    async def run() -> Any:
        database = Database.connect(url)
        try:
            return await database.read(work, snapshot=True)
        finally:
            await database.dispose()

    return asyncio.run(run())


def naming(url: str, key: str, ids: set[int]) -> dict[str, int]:
    """For each table of the database (its catalog's list), the rows holding `key` in any
    column, or one of `ids` in a `session_id`."""

    async def scan(conn: AsyncConnection) -> dict[str, int]:
        tables = await conn.run_sync(lambda c: inspect(c).get_table_names())
        assert set(metadata.tables) <= set(tables)
        found: dict[str, int] = {}
        for table in tables:
            rows = (await conn.execute(text(f'SELECT * FROM "{table}"'))).mappings().all()
            hits = sum(1 for row in rows if _names(row, key, ids))
            if hits:
                found[table] = hits
        return found

    result: dict[str, int] = db(url, scan)
    return result


def _names(row: Any, key: str, ids: set[int]) -> bool:
    for column, value in row.items():
        if isinstance(value, str) and key in value:
            return True
        if isinstance(value, bytes | memoryview) and key.encode() in bytes(value):
            return True
        if column == "session_id" and value in ids:
            return True
    return False


def session_ids(url: str, scope: str, key: str) -> set[int]:
    async def read(conn: AsyncConnection) -> set[int]:
        sql = "SELECT id FROM sessions WHERE scope = :s AND (key = :k OR root_key = :k)"
        return {int(r[0]) for r in await conn.execute(text(sql), {"s": scope, "k": key})}

    found: set[int] = db(url, read)
    return found


def usage_totals(url: str, scope: str) -> tuple[int, int, int]:
    """Requests and tokens of the scope: its sessions' usage rows plus the daily totals."""

    async def read(conn: AsyncConnection) -> tuple[int, int, int]:
        live = (
            await conn.execute(
                text(
                    "SELECT count(*), coalesce(sum(u.prompt_tokens), 0), "
                    "coalesce(sum(u.completion_tokens), 0) FROM usage u "
                    "JOIN sessions s ON s.id = u.session_id WHERE s.scope = :s"
                ),
                {"s": scope},
            )
        ).one()
        kept = (
            await conn.execute(
                text(
                    "SELECT coalesce(sum(requests), 0), coalesce(sum(prompt_tokens), 0), "
                    "coalesce(sum(completion_tokens), 0) FROM usage_daily WHERE scope = :s"
                ),
                {"s": scope},
            )
        ).one()
        return (
            int(live[0]) + int(kept[0]),
            int(live[1]) + int(kept[1]),
            int(live[2]) + int(kept[2]),
        )

    totals: tuple[int, int, int] = db(url, read)
    return totals


@pytest.mark.parametrize("how", ["admin", "retention"])
def test_a_deleted_session_leaves_no_row_and_the_totals_stay(
    sim: Simulator, proxy: ProxyServer, db_url: str, how: str
) -> None:
    api_key = f"sk-{uuid.uuid4().hex}"  # a scope of this test's own (PostgreSQL is shared)
    scope = scope_for(api_key)
    doomed = f"doomed-{uuid.uuid4().hex[:12]}"
    kept = f"kept-{uuid.uuid4().hex[:12]}"
    converse(sim, proxy, api_key, doomed)
    ask(proxy, api_key, kept)
    before = settled(proxy)
    assert before["shadow"]["total"]["samples"] > 0
    usage_before = usage_totals(db_url, scope)
    ids = session_ids(db_url, scope, doomed)
    assert ids and naming(db_url, doomed, ids).keys() >= {
        "sessions",
        "checkpoints",
        "archived_messages",
        "events",
        "usage",
        "charges",
        "shadow_checks",
    }
    kept_before = admin(proxy, "GET", scope, kept).json()["savings"]
    # A switch set for the session is one of its rows too: a reused id must not inherit it.
    root = proxy.base_url.removesuffix("/v1")
    switched = httpx.put(
        f"{root}/admin/sessions/{scope}/{quote(doomed, safe='')}/compression",
        json={"enabled": False},
        headers=ADMIN,
        timeout=30,
    )
    assert switched.status_code == 200, switched.text
    assert "session_switches" in naming(db_url, doomed, ids)

    if how == "admin":
        assert admin(proxy, "DELETE", scope, doomed).json()["deleted"] is True
    else:
        time.sleep(3.0)
        ask(proxy, api_key, kept)  # the kept session is active, the doomed one idle 3 s
        kept_before = None
        before = settled(proxy)
        usage_before = usage_totals(db_url, scope)
        sweeper = Sweeper(proxy.services.store, RetentionPolicy(idle_s=2.0), "test")
        report = proxy.run(sweeper.sweep())
        assert report.sessions == 1, report

    assert naming(db_url, doomed, ids) == {}
    assert settled(proxy) == before  # money, tokens and shadow agreement over all sessions
    assert usage_totals(db_url, scope) == usage_before
    assert admin(proxy, "GET", scope, doomed).status_code == 404
    if kept_before is not None:
        assert admin(proxy, "GET", scope, kept).json()["savings"] == kept_before

    ask(proxy, api_key, doomed)  # the id again: a new session, charged from zero
    settled(proxy)
    detail = admin(proxy, "GET", scope, doomed).json()
    assert detail["session"]["request_count"] == 1
    assert [c["kind"] for c in detail["charges"]] == ["request"]
    assert detail["savings"]["requests"] == 1
