"""Fixtures shared by the simulator's own tests (tests/test_simulator_*.py): one simulator per
test module, reset before every test, and an openai and an httpx client bound to it.

A test module imports them as ``from tests.simulator.fixtures import sim as sim``: pytest finds
fixtures among a module's names, and the redundant alias marks the import as a deliberate export,
so linters do not take it for an unused import shadowed by the tests' parameters.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from .models import ModelSpec
from .server import Simulator
from .testing import MODELS


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(models=MODELS, default=ModelSpec(window=128_000)) as s:
        yield s


@pytest.fixture(autouse=True)
def reset_simulator(request: pytest.FixtureRequest) -> Iterator[None]:
    if "sim" in request.fixturenames:
        s: Simulator = request.getfixturevalue("sim")
        s.clear()
        s.responder = None
        s.validate_messages = False
    yield


@pytest.fixture(scope="module")
def client(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.base_url, api_key="sk-test-key", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.base_url, timeout=10) as c:
        yield c
