"""The file the user asked to fix stays in view while the agent works on others.

One session per wire API (tests/session/working_set_agents.py), against a 32K window with
ctxgate's default compression settings: the user asks to fix `src/shop/billing.py`; the model
reads it, reads, tests and edits six other modules, reads the named file again, goes through
the six modules once more (each read again and edited, so each is newer and worked on) and
only then edits the named file. From the request that first holds the second read on, every
request the provider receives must hold that read verbatim: in the tail, or in the handoff's
Files section, never clipped, although newer reads of worked-on files compete for the room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compression.summary.prompts import SUMMARY_PREFIX
from tests.servers import ProxyServer, settings_for
from tests.session.working_set_agents import (
    MODEL,
    PLAN,
    TARGET,
    WINDOW,
    Agent,
    ChatAgent,
    ClaudeCodeAgent,
    CodexAgent,
    GeminiAgent,
    Model,
    Repository,
    file_text,
)
from tests.simulator import ModelSpec, Received, Simulator


def strings(value: Any) -> Iterator[str]:
    """Every string of a request body: the view's texts, whatever the API's shape."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@dataclass(frozen=True)
class Door:
    make: Callable[[ProxyServer, Repository], Agent]
    forwarded: Callable[[Received], bool]
    gemini: bool = False


DOORS = {
    "chat": Door(ChatAgent, lambda r: r.is_chat),
    "responses": Door(CodexAgent, lambda r: r.is_responses),
    "messages": Door(ClaudeCodeAgent, lambda r: r.is_messages),
    "gemini": Door(GeminiAgent, lambda r: "generateContent" in r.path, gemini=True),
}


@dataclass(frozen=True)
class Run:
    requests: list[Received]
    reads: dict[str, int]


@pytest.fixture(scope="module", params=list(DOORS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    door = DOORS[request.param]
    db_path = str(Path(tmp_path_factory.mktemp(request.param)) / "ctxgate.db")
    dialect = "anthropic" if request.param == "messages" else "openai"
    with Simulator(models={MODEL: ModelSpec(window=WINDOW, dialect=dialect)}) as sim:
        sim.responder = Model()
        url = sim.gemini_url if door.gemini else sim.base_url
        api = {"chat": "chat", "responses": "responses", "messages": "messages"}
        settings = settings_for(
            url,
            db_path,
            api_key=None,
            models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
            upstreams={"sim": {"base_url": url, "apis": [api.get(request.param, "gemini")]}},
        )
        repo = Repository()
        with ProxyServer(settings) as proxy:
            agent = door.make(proxy, repo)
            for _ in range(len(PLAN) + 1):
                if not agent.turn():
                    break
        requests = [r for r in sim.received if door.forwarded(r) and not r.is_summary]
        return Run(requests, dict(repo.reads))


def test_the_session_is_compressed_several_times(run: Run) -> None:
    assert run.reads[TARGET] == 2
    # A request over the window is answered with an overflow that ctxgate recovers from.
    assert [r.problems for r in run.requests if r.problems] == []
    assert {r.outcome for r in run.requests} <= {"reply", "overflow"}
    assert run.requests[-1].outcome == "reply"
    handoffs = {
        text[:400] for r in run.requests for text in strings(r.body) if SUMMARY_PREFIX in text
    }
    assert len(handoffs) >= 3, f"{len(handoffs)} distinct handoffs: too few compressions"


def test_the_named_files_newest_read_is_in_every_request_after_the_reread(run: Run) -> None:
    newest = file_text(TARGET, 2)
    held = ["\n".join(strings(r.body)) for r in run.requests]
    first = next(i for i, text in enumerate(held) if newest in text)
    after = held[first:]
    missing = [first + i for i, text in enumerate(after) if newest not in text]
    assert len(after) >= 25
    assert not missing, f"missing from {len(missing)} of {len(after)} requests: {missing}"
