"""The archive of originals: every client message a checkpoint replaces is archived once.

A long agent loop through a real ctxgate and the simulator; what counts as replaced is worked
out from what the client sent and what the upstream last received, never from ctxgate's own
bookkeeping. The admin audit must agree with it.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from compression import RECALLED_CLOSE, RECALLED_OPEN
from session.identity import scope_for
from tests.proxy.agent_loop import TOOLS, AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

WINDOW = 8192
MODEL = "agent-8k"
ADMIN = {"Authorization": "Bearer adm"}
SESSION = "archive/long loop"


sim8k = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def canonical(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True)


def unplaced(message: dict[str, Any]) -> dict[str, Any]:
    """The message without the archived passages recall before asking put in it (after a
    user's words, before a tool's output): the client's original is still in view, only
    beside them, so it replaces nothing."""
    content = message.get("content")
    if isinstance(content, str) and content.startswith(RECALLED_OPEN):
        end = content.find(RECALLED_CLOSE + "\n\n")
        if end >= 0:
            return {**message, "content": content[end + len(RECALLED_CLOSE) + 2 :]}
    if isinstance(content, str) and (at := content.find("\n\n" + RECALLED_OPEN)) >= 0:
        return {**message, "content": content[:at]}
    if isinstance(content, list) and content:
        for index in (0, -1):
            part = content[index]
            if isinstance(part, dict) and str(part.get("text", "")).startswith(RECALLED_OPEN):
                rest = content[1:] if index == 0 else content[:-1]
                return {**message, "content": rest}
    return message


def replaced_by_view(history: list[dict[str, Any]], view: list[dict[str, Any]]) -> list[int]:
    """Client positions whose message the forwarded view does not hold verbatim."""
    held = {canonical(unplaced(m)) for m in view}
    return [p for p, message in enumerate(history) if canonical(message) not in held]


def run_loop(
    sim: Simulator, db_path: str, steps: int, midway: Callable[[], None] | None = None
) -> tuple[AgentLoop, dict[str, Any], Any]:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    settings = settings_for(
        sim.base_url,
        db_path,
        models=models,
        # Room for every passage recall before asking finds, the last request's included.
        compression={"background": False, "recall": {"ahead_share": 0.5}},
        auth={"admin_key": "adm"},
    )
    with ProxyServer(settings) as proxy:
        loop = AgentLoop(
            openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0),
            MODEL,
            session_id=SESSION,
        )
        loop.script(sim)
        for step in range(steps):
            if midway is not None and step == steps // 2:
                midway()
            loop.step(step)
        # One last request: the view the upstream receives answers exactly this history. It
        # names step 20's file or test run (archived long ago), so recall before asking appends
        # archived passages to it.
        last = "Summarise what you did to module_20.py and tests/test_mod_20.py."
        history = [*loop.messages, {"role": "user", "content": last}]
        final = loop.client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=history,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": SESSION},
        )
        root = proxy.base_url.removesuffix("/v1")
        url = f"{root}/admin/sessions/{scope_for('sk-agent')}/{quote(SESSION, safe='')}"
        archive = httpx.get(f"{url}/archive", headers=ADMIN).json()["data"]
        audit = httpx.get(f"{url}/audit", headers=ADMIN)
    view = [r for r in sim.chat_requests if not r.is_summary][-1].body["messages"]
    ahead = final.headers.get("x-ctxgate-recalled-ahead")
    outcome = {"history": history, "view": view, "archive": archive, "ahead": ahead}
    return loop, outcome, audit


def forget_sources(db_path: str) -> None:
    """Make the stored checkpoints look like those written before sources were recorded."""
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE checkpoints SET sources = NULL")


@pytest.mark.parametrize("stored", ["with_sources", "legacy_midway"])
def test_every_replaced_original_is_archived_exactly_once(
    sim8k: Simulator, db_path: str, stored: str
) -> None:
    midway = (lambda: forget_sources(db_path)) if stored == "legacy_midway" else None
    loop, run, audit = run_loop(sim8k, db_path, steps=60, midway=midway)
    assert "true" in loop.compressed_headers
    history, view, archive = run["history"], run["view"], run["archive"]
    assert run["ahead"], "the last request should carry passages recalled before asking"
    replaced = replaced_by_view(history, view)
    assert len(replaced) > len(history) // 2, "the loop did not compress enough to test"
    by_position: dict[int, list[dict[str, Any]]] = {}
    for row in archive:
        by_position.setdefault(row["position"], []).append(row["message"])
    missing = [p for p in replaced if p not in by_position]
    print(f"\n{len(missing)} of {len(replaced)} replaced originals missing from the archive")
    assert missing == []
    for position in replaced:
        assert [canonical(m) for m in by_position[position]] == [canonical(history[position])]
    assert max(Counter(row["position"] for row in archive).values()) == 1
    assert audit.status_code == 200, audit.text
    report = audit.json()
    assert report["object"] == "archive_audit"
    assert report["missing"] == [] and report["complete"] is True
    # The audit's replaced positions are the client's view of them (the request just sent
    # after the newest checkpoint adds only messages it holds verbatim).
    assert report["replaced"] == [p for p in replaced if p < report["prefix_len"]]
    assert set(report["archived"]) >= set(report["replaced"])


def test_audit_of_an_unknown_session_is_not_found(sim: Simulator, db_path: str) -> None:
    settings = settings_for(sim.base_url, db_path, auth={"admin_key": "adm"})
    with ProxyServer(settings) as proxy:
        root = proxy.base_url.removesuffix("/v1")
        response = httpx.get(f"{root}/admin/sessions/anon/nobody/audit", headers=ADMIN)
        unauthorised = httpx.get(f"{root}/admin/sessions/anon/nobody/audit")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "session_not_found"
    assert unauthorised.status_code == 401
