"""Fixtures: every store test runs on SQLite (a real file in tmp_path) and, when
CTXGATE_TEST_PG_URL is set, on PostgreSQL (start one with scripts/pg-test-server.sh)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from storage import SessionStore
from storage.database.db import Database
from tests.storage.factories import FakeClock

PG_ENV = "CTXGATE_TEST_PG_URL"


async def _reset_postgres(url: str) -> None:
    db = Database.connect(url)
    try:
        await db.write(lambda conn: conn.execute(text("DROP SCHEMA public CASCADE")))
        await db.write(lambda conn: conn.execute(text("CREATE SCHEMA public")))
    finally:
        await db.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/data/ctxgate.db"
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    await _reset_postgres(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: os.PathLike[str]) -> str:
    return f"sqlite+aiosqlite:///{tmp_path}/ctxgate.db"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(store_url: str, clock: FakeClock) -> AsyncIterator[SessionStore]:
    opened = await SessionStore.open(store_url, clock=clock)
    yield opened
    await opened.close()
