"""``proxy_fixture``: ctxgate, served on a loopback port, in front of a test's simulator."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator


def proxy_fixture(**settings: Any) -> Any:
    """A pytest fixture yielding a running ``ProxyServer`` whose upstream is the test's ``sim``
    and whose database is its ``db_path``, with ``settings`` passed on to ``settings_for``;
    named after the module attribute it is assigned to::

        proxy = proxy_fixture(server={"body_timeout_s": 1.0})

    Each server reads its own copy of ``settings``, so nothing one test's ctxgate does to them
    reaches the next test's.
    """

    @pytest.fixture
    def proxy(sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
        with ProxyServer(settings_for(sim.base_url, db_path, **copy.deepcopy(settings))) as server:
            yield server

    return proxy
