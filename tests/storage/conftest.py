"""Fixtures: every store test runs on SQLite (a real file in tmp_path) and, when
CTXGATE_TEST_PG_URL is set, on PostgreSQL (start one with scripts/pg-test-server.sh)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from storage import SessionStore
from tests.storage.factories import PG_ENV, FakeClock, reset_postgres


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/data/ctxgate.db"
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} not set (scripts/pg-test-server.sh starts a server)")
    await reset_postgres(url)
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
