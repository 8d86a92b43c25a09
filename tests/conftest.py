from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simulator import ModelSpec, Simulator


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(
        models={
            "small-8k": ModelSpec(window=8192, dialect="openai"),
            "gpt-4o-mini": ModelSpec(window=128_000, dialect="openai"),
        },
        default=ModelSpec(window=128_000, dialect="openai"),
    ) as simulator:
        yield simulator


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "ctxgate.db")
