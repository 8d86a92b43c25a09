"""Simulator fixtures: ``simulator_fixture``, which any test module uses to state in one line
the simulator its tests run against, and the fixtures shared by the simulator's own tests
(tests/simulator/test_*.py): one simulator per test module, reset before every test, and an
openai and an httpx client bound to it.

A test module imports the latter as ``from tests.simulator.fixtures import sim as sim``: pytest
finds fixtures among a module's names, and the redundant alias marks the import as a deliberate
export, so linters do not take it for an unused import shadowed by the tests' parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import httpx
import openai
import pytest

from .models import ModelSpec
from .server import Responder, Simulator
from .testing import MODELS


def simulator_fixture(
    models: Mapping[str, ModelSpec] | None = None,
    default: ModelSpec | None = None,
    *,
    responder: Callable[[], Responder] | None = None,
    scope: Literal["function", "module"] = "function",
    **options: Any,
) -> Any:
    """A pytest fixture yielding a running ``Simulator(models, default, **options)``, named after
    the module attribute it is assigned to::

        sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)

    ``responder`` makes the simulator's responder, once per simulator, so one that keeps state
    (which turn it is on, whether it already held a request) starts afresh for every test. Each
    simulator gets its own copies of the specs too: a test that changes one leaves the next
    test's alone.
    """

    @pytest.fixture(scope=scope)
    def simulator() -> Iterator[Simulator]:
        specs = copy.deepcopy(dict(models or {}))
        with Simulator(specs, copy.deepcopy(default), **options) as running:
            if responder is not None:
                running.responder = responder()
            yield running

    return simulator


sim = simulator_fixture(MODELS, ModelSpec(window=128_000), scope="module")


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
