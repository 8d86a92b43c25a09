from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import SessionStore
from tests.simulator import ModelSpec
from tests.simulator.fixtures import simulator_fixture

# The simulator of a test that names no other: a module whose tests need other models or
# options states them in its own `sim = simulator_fixture(...)`.
sim = simulator_fixture(
    {
        "small-8k": ModelSpec(window=8192, dialect="openai"),
        "gpt-4o-mini": ModelSpec(window=128_000, dialect="openai"),
    },
    ModelSpec(window=128_000, dialect="openai"),
)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "ctxgate.db")


@pytest.fixture
async def store(db_path: str) -> AsyncIterator[SessionStore]:
    """A store on a SQLite file of its own (tests/storage's own runs on PostgreSQL too)."""
    store = await SessionStore.open(f"sqlite+aiosqlite:///{db_path}")
    try:
        yield store
    finally:
        await store.close()
