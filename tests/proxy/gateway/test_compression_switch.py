"""Compression switched off for one session, on each of the four APIs: httpx -> ctxgate -> the
simulator, whose model's window is smaller than the client's history.

Switched on (the default), ctxgate compresses the history on its way in and the request is
answered. Switched off (a request header, or the admin API), the upstream receives the
client's bytes exactly and its overflow error reaches the client; the switch is stored with
the session, so the session's next requests stay off until it is switched back on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest

from session.identity import scope_for
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

WINDOW = 4000
MODEL = "tiny"
ADMIN = {"authorization": "Bearer adm"}
SWITCH = "x-ctxgate-compression"

sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, ModelSpec(window=128_000))


def texts() -> list[str]:
    """Eight turns of about 700 tokens each: over the window together."""
    return [f"Message {i}: " + f"topic{i} detail " * 350 for i in range(8)]


@dataclass(frozen=True)
class Api:
    name: str
    path: str
    headers: dict[str, str]

    def body(self) -> dict[str, Any]:
        turns = texts()
        roles = ["user", "assistant"] * 4
        if self.name == "chat":
            return {
                "model": MODEL,
                "messages": [{"role": r, "content": t} for r, t in zip(roles, turns, strict=True)][
                    :-1
                ]
                + [{"role": "user", "content": "Go on."}],
            }
        if self.name == "responses":
            items = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=True)]
            return {"model": MODEL, "input": [*items[:-1], {"role": "user", "content": "Go on."}]}
        if self.name == "messages":
            items = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=True)]
            return {
                "model": MODEL,
                "max_tokens": 64,
                "messages": [*items[:-1], {"role": "user", "content": "Go on."}],
            }
        contents = [
            {"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]}
            for r, t in zip(roles, turns, strict=True)
        ]
        return {"contents": [*contents[:-1], {"role": "user", "parts": [{"text": "Go on."}]}]}


APIS = [
    Api("chat", "/v1/chat/completions", {}),
    Api("responses", "/v1/responses", {}),
    Api("messages", "/v1/messages", {"anthropic-version": "2023-06-01"}),
    Api("gemini", f"/v1beta/models/{MODEL}:generateContent", {}),
]


def settings(sim: Simulator, db_path: str) -> Any:
    upstreams = {
        "sim": {
            "base_url": sim.base_url,
            "api_key": "k",
            "apis": ["chat", "responses", "messages"],
        },
        "gem": {"base_url": sim.gemini_url, "api_key": "k", "apis": ["gemini"]},
    }
    return settings_for(
        sim.base_url,
        db_path,
        upstreams=upstreams,
        models=[{"match": MODEL, "upstream": "sim", "context_length": WINDOW}],
        compression={"background": False},
        auth={"admin_key": "adm"},
    )


def gemini_settings(sim: Simulator, db_path: str) -> Any:
    upstreams = {"gem": {"base_url": sim.gemini_url, "api_key": "k", "apis": ["gemini"]}}
    return settings_for(
        sim.base_url,
        db_path,
        upstreams=upstreams,
        models=[{"match": MODEL, "upstream": "gem", "context_length": WINDOW}],
        compression={"background": False},
        auth={"admin_key": "adm"},
    )


class Client:
    def __init__(self, proxy: ProxyServer, api: Api, session: str) -> None:
        self.root = proxy.base_url.removesuffix("/v1")
        self.api = api
        self.session = session
        self.raw = orjson.dumps(api.body())

    def send(self, **headers: str) -> httpx.Response:
        sent = {
            "content-type": "application/json",
            "authorization": "Bearer sk-client",
            "x-session-id": self.session,
            **self.api.headers,
            **headers,
        }
        return httpx.post(self.root + self.api.path, content=self.raw, headers=sent, timeout=60)

    def switch(self, enabled: bool, scope: str) -> httpx.Response:
        path = f"/admin/sessions/{scope}/{self.session}/compression"
        return httpx.put(self.root + path, json={"enabled": enabled}, headers=ADMIN)


def listed(proxy: ProxyServer, session: str) -> dict[str, Any]:
    """The session's row in the admin API's list."""
    proxy.run(proxy.services.store.flush())
    root = proxy.base_url.removesuffix("/v1")
    rows = httpx.get(root + "/admin/sessions", headers=ADMIN).json()["data"]
    found: dict[str, Any] = next(s for s in rows if s["key"] == session)
    return found


def forwarded(sim: Simulator) -> list[Any]:
    return [r for r in sim.received if not r.is_summary]


@pytest.mark.parametrize("api", APIS, ids=[a.name for a in APIS])
def test_the_header_and_the_admin_call_switch_compression_off_and_on(
    sim: Simulator, db_path: str, api: Api
) -> None:
    make = gemini_settings if api.name == "gemini" else settings
    with ProxyServer(make(sim, db_path)) as proxy:
        # On (the default): compressed on its way in, answered.
        on = Client(proxy, api, "switch/control").send()
        assert on.status_code == 200, on.text
        assert on.headers["x-ctxgate-compressed"] == "true"
        assert forwarded(sim)[-1].raw != orjson.dumps(api.body())
        sim.clear()

        client = Client(proxy, api, "switch/one")
        off = client.send(**{SWITCH: "off"})
        # Verbatim: the client's bytes, no summary call, and the provider's overflow error.
        assert [r.raw for r in sim.received] == [client.raw]
        assert off.status_code == 400, off.text
        assert off.headers["x-ctxgate-compression"] == "off"
        assert off.headers["x-session-id"] == "switch/one"
        # Stored: the next request, without the header, is relayed verbatim too.
        again = client.send()
        assert again.status_code == 400
        assert [r.raw for r in sim.received] == [client.raw, client.raw]
        # The admin API switches it back on, and off again; the session list shows it.
        scope = scope_for("sk-client")
        switched = client.switch(True, scope)
        assert switched.status_code == 200, switched.text
        assert switched.json()["compression"] == "on"
        back = client.send()
        assert back.status_code == 200, back.text
        assert back.headers["x-ctxgate-compressed"] == "true"
        assert "x-ctxgate-compression" not in back.headers
        assert listed(proxy, client.session)["compression"] == "on"
        assert client.switch(False, scope).json() == {
            "scope": scope,
            "key": client.session,
            "compression": "off",
            "known": True,
        }
        assert listed(proxy, client.session)["compression"] == "off"
        sim.clear()
        assert client.send().status_code == 400
        assert [r.raw for r in sim.received] == [client.raw]
        assert client.send(**{SWITCH: "on"}).status_code == 200


def test_a_bad_switch_value_is_a_clear_error(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings(sim, db_path)) as proxy:
        answer = Client(proxy, APIS[0], "switch/bad").send(**{SWITCH: "maybe"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == SWITCH and "'on' or 'off'" in error["message"]
    assert sim.received == []


def test_the_switch_holds_across_replicas(sim: Simulator, db_path: str) -> None:
    """Two ctxgates on one database: switched off through one, the other relays verbatim."""
    api = APIS[0]
    with (
        ProxyServer(settings(sim, db_path)) as first,
        ProxyServer(settings(sim, db_path)) as second,
    ):
        a = Client(first, api, "switch/shared")
        assert a.send(**{SWITCH: "off"}).status_code == 400
        sim.clear()
        b = Client(second, api, "switch/shared")
        assert b.send().status_code == 400
        assert [r.raw for r in sim.received] == [b.raw]


def test_a_switch_the_database_cannot_store_still_holds_for_the_request(
    sim: Simulator, db_path: str
) -> None:
    """The header's switch is this request's whatever the store says: a database that refuses
    the write (here, its table gone) is logged, never the client's 500."""
    import sqlite3

    with ProxyServer(settings(sim, db_path)) as proxy:
        with sqlite3.connect(db_path) as conn:
            conn.execute("DROP TABLE session_switches")
        client = Client(proxy, APIS[0], "switch/unstored")
        off = client.send(**{SWITCH: "off"})
        assert off.status_code == 400, off.text  # relayed verbatim: the provider's overflow
        assert [r.raw for r in sim.received] == [client.raw]
        assert off.headers["x-ctxgate-compression"] == "off"


def test_the_admin_call_aimed_at_a_fork_switches_the_clients_session(
    sim: Simulator, db_path: str
) -> None:
    """A fork's key (what the session list may show) names the client's session: the switch
    lands where requests read it."""
    api = APIS[0]
    with ProxyServer(settings(sim, db_path)) as proxy:
        client = Client(proxy, api, "switch/forked")
        assert client.send().status_code == 200
        # A rewind: the first user message edited, so the session gets a second lineage.
        body = api.body()
        body["messages"][0]["content"] = "An edited opening. " + body["messages"][0]["content"]
        edited = httpx.post(
            client.root + api.path,
            content=orjson.dumps(body),
            headers={"authorization": "Bearer sk-client", "x-session-id": client.session},
            timeout=60,
        )
        assert edited.status_code == 200, edited.text
        proxy.run(proxy.services.store.flush())
        scope = scope_for("sk-client")
        rows = httpx.get(client.root + "/admin/sessions?limit=500", headers=ADMIN).json()["data"]
        forks = [
            s["key"]
            for s in rows
            if s["key"].startswith(client.session) and s["key"] != client.session
        ]
        target = forks[0] if forks else client.session
        answer = httpx.put(
            f"{client.root}/admin/sessions/{scope}/{quote(target, safe='')}/compression",
            json={"enabled": False},
            headers=ADMIN,
        )
        assert answer.status_code == 200, (answer.text, forks, target)
        assert answer.json()["key"] == client.session
        sim.clear()
        assert client.send().status_code == 400
        assert [r.raw for r in sim.received] == [client.raw]
