"""The admin API: a real ctxgate, sessions made by the OpenAI SDK, answers read over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from compression.options import CompressorOptions
from compression.thresholds import limits_for
from session.identity import scope_for
from storage import SessionKey
from tests.proxy.agent_loop import AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

ADMIN = {"Authorization": "Bearer adm"}
MODEL = "small-8k"  # 8,192-token window in the `sim` fixture
AGENT_KEY = "sk-agent"
SESSION = "team/agent one?#"  # client-chosen ids may hold "/", "?", "#" and spaces
MODELS = [{"match": "*", "upstream": "sim", "context_length": 8192}]


def admin_settings(sim: Simulator, db_path: str, **extra: Any) -> Any:
    # Synchronous triggers only, so the stored events are final when a request returns.
    return settings_for(
        sim.base_url,
        db_path,
        models=MODELS,
        compression={"background": False},
        auth={"admin_key": "adm"},
        **extra,
    )


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    with ProxyServer(admin_settings(sim, db_path)) as server:
        yield server


def root(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def session_url(proxy: ProxyServer, scope: str, key: str, tail: str = "") -> str:
    return f"{root(proxy)}/admin/sessions/{scope}/{quote(key, safe='')}{tail}"


def client(proxy: ProxyServer, api_key: str = AGENT_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=api_key, max_retries=0)


def flushed(proxy: ProxyServer) -> None:
    """Usage is written behind the response; wait until it is in the database."""
    proxy.run(proxy.services.store.flush())


def grow_compressed(sim: Simulator, proxy: ProxyServer, session_id: str = SESSION) -> AgentLoop:
    """An agent conversation driven until ctxgate has compressed it, then two turns more."""
    loop = AgentLoop(client(proxy), MODEL, session_id=session_id)
    loop.script(sim)
    loop.past_compression()
    flushed(proxy)
    return loop


def chat(proxy: ProxyServer, session_id: str, words: int, api_key: str = AGENT_KEY) -> None:
    client(proxy, api_key).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "word " * words}],
        extra_headers={"X-Session-Id": session_id},
    )


def assert_envelope(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param


# -- auth --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "tail", "body"),
    [
        ("GET", "", None),
        ("GET", "/archive", None),
        ("GET", "/audit", None),
        ("GET", "/activity", None),
        ("POST", "/compress", b"{not json"),
        ("DELETE", "", None),
    ],
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}])
def test_every_route_wants_the_admin_key(
    proxy: ProxyServer, method: str, tail: str, body: bytes | None, headers: dict[str, str]
) -> None:
    url = session_url(proxy, "anon", "s", tail)
    assert_envelope(httpx.request(method, url, headers=headers, content=body), 401)
    listing = httpx.get(f"{root(proxy)}/admin/sessions?order=bad", headers=headers)
    assert_envelope(listing, 401)  # the key is checked before the parameters
    assert listing.json()["error"]["type"] == "authentication_error"


def test_admin_api_is_off_without_an_admin_key(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings_for(sim.base_url, db_path)) as server:
        response = httpx.get(f"{root(server)}/admin/sessions", headers=ADMIN)
    assert_envelope(response, 401)
    assert "admin_key" in response.json()["error"]["message"]


# -- listing -----------------------------------------------------------------------------------


def test_sessions_are_listed_newest_first_and_paged(proxy: ProxyServer) -> None:
    for n in range(5):
        chat(proxy, f"s{n}", words=10)
    flushed(proxy)
    url = f"{root(proxy)}/admin/sessions"
    page = httpx.get(url, headers=ADMIN).json()
    assert page["object"] == "list"
    assert [s["key"] for s in page["data"]] == ["s4", "s3", "s2", "s1", "s0"]
    assert page["has_more"] is False
    first = httpx.get(url, params={"limit": 2}, headers=ADMIN).json()
    second = httpx.get(url, params={"limit": 2, "offset": 2}, headers=ADMIN).json()
    last = httpx.get(url, params={"limit": 2, "offset": 4}, headers=ADMIN).json()
    assert [s["key"] for s in first["data"] + second["data"] + last["data"]] == [
        "s4",
        "s3",
        "s2",
        "s1",
        "s0",
    ]
    assert (first["has_more"], second["has_more"], last["has_more"]) == (True, True, False)
    row = first["data"][0]
    assert row["model"] == MODEL
    assert row["request_count"] == 1
    assert row["last_prompt_tokens"] > 0
    assert row["last_prompt_tokens_pending"] is False
    assert "engine_state" not in row


def test_sessions_sort_by_tokens_and_filter_by_scope(proxy: ProxyServer) -> None:
    chat(proxy, "small", words=10)
    chat(proxy, "large", words=900)
    chat(proxy, "medium", words=300)
    chat(proxy, "other-caller", words=2000, api_key="sk-someone-else")
    flushed(proxy)
    url = f"{root(proxy)}/admin/sessions"
    by_tokens = httpx.get(url, params={"order": "tokens"}, headers=ADMIN).json()
    assert by_tokens["order"] == "tokens"
    assert [s["key"] for s in by_tokens["data"]] == ["other-caller", "large", "medium", "small"]
    mine = httpx.get(
        url, params={"order": "tokens", "scope": scope_for(AGENT_KEY)}, headers=ADMIN
    ).json()
    assert [s["key"] for s in mine["data"]] == ["large", "medium", "small"]
    assert {s["scope"] for s in mine["data"]} == {scope_for(AGENT_KEY)}


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"order": "cost"}, "order"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"scope": ""}, "scope"),
    ],
)
def test_bad_list_parameters_get_a_400(
    proxy: ProxyServer, query: dict[str, Any], param: str
) -> None:
    response = httpx.get(f"{root(proxy)}/admin/sessions", params=query, headers=ADMIN)
    assert_envelope(response, 400, param)
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "File " not in response.json()["error"]["message"]  # no internals in the message


# -- one session -------------------------------------------------------------------------------


def test_detail_shows_usage_events_checkpoints_limits_and_summary(
    sim: Simulator, proxy: ProxyServer
) -> None:
    loop = grow_compressed(sim, proxy)
    detail = httpx.get(session_url(proxy, scope_for(AGENT_KEY), SESSION), headers=ADMIN).json()
    session = detail["session"]
    assert (session["key"], session["scope"]) == (SESSION, scope_for(AGENT_KEY))
    assert session["request_count"] == len(loop.responses)
    assert session["compression_count"] >= 1
    assert len(detail["usage"]) == session["request_count"]
    assert [u["prompt_tokens"] for u in detail["usage"]] == [
        r.usage.prompt_tokens for r in loop.responses
    ]
    committed = [e for e in detail["events"] if e["outcome"] in ("compressed", "fallback")]
    assert committed and all(e["tokens_after"] < e["tokens_before"] for e in committed)
    assert {e["checkpoint_id"] for e in committed} == {c["id"] for c in detail["checkpoints"]}
    expected = limits_for(
        CompressorOptions.from_mapping(
            {"threshold": 0.5, "hygiene_threshold": 0.85, "hygiene_max_messages": 5000}
        ),
        8192,
        None,
    )
    limits = detail["limits"]
    assert limits["context_length"] == 8192
    assert limits["threshold"] == expected.threshold
    assert limits["hygiene_tokens"] == expected.hygiene_tokens
    assert detail["summary"] == detail["checkpoints"][-1]["summary"]
    assert isinstance(detail["summary"], str) and detail["summary"].strip()
    assert detail["archived_count"] > 0
    assert "previous_summary" not in detail["engine_state"]


def test_archive_holds_the_originals_compression_replaced(
    sim: Simulator, proxy: ProxyServer
) -> None:
    loop = grow_compressed(sim, proxy)
    url = session_url(proxy, scope_for(AGENT_KEY), SESSION, "/archive")
    archive = httpx.get(url, headers=ADMIN).json()
    assert archive["key"] == SESSION
    assert archive["data"]
    for item in archive["data"]:
        original = loop.messages[item["position"]]
        assert item["message"]["role"] == original["role"]
        assert item["message"].get("content") == original.get("content")
    # The system prompt stays verbatim in every view: no checkpoint replaced it.
    assert all(item["position"] > 0 for item in archive["data"])


def test_unknown_sessions_get_404(proxy: ProxyServer) -> None:
    routes = [("GET", ""), ("GET", "/archive"), ("GET", "/audit"), ("POST", "/compress")]
    for method, tail in [*routes, ("DELETE", "")]:
        response = httpx.request(method, session_url(proxy, "anon", "nope", tail), headers=ADMIN)
        assert_envelope(response, 404)
        assert response.json()["error"]["code"] == "session_not_found"


# -- actions -----------------------------------------------------------------------------------


def test_compress_now_adds_a_manual_event(sim: Simulator, proxy: ProxyServer) -> None:
    grow_compressed(sim, proxy)
    url = session_url(proxy, scope_for(AGENT_KEY), SESSION)
    before = httpx.get(url, headers=ADMIN).json()
    done = httpx.post(url + "/compress", json={"focus": "the failing tests"}, headers=ADMIN)
    assert done.status_code == 200, done.text
    result = done.json()
    assert result["key"] == SESSION
    assert result["outcome"] in ("compressed", "fallback", "noop", "rejected")
    after = httpx.get(url, headers=ADMIN).json()
    assert len(after["events"]) == len(before["events"]) + 1
    manual = after["events"][-1]
    assert manual["trigger"] == "manual"
    assert manual["outcome"] == result["outcome"]
    if result["compressed"]:
        assert after["session"]["compression_count"] == before["session"]["compression_count"] + 1
        summary_request = sim.summary_requests[-1].body
        assert "the failing tests" in str(summary_request["messages"])


def test_compress_works_without_a_body_and_rejects_a_bad_one(
    sim: Simulator, proxy: ProxyServer
) -> None:
    grow_compressed(sim, proxy)
    url = session_url(proxy, scope_for(AGENT_KEY), SESSION, "/compress")
    assert httpx.post(url, headers=ADMIN).status_code == 200
    bad_json = httpx.post(
        url, content=b"{nope", headers={**ADMIN, "content-type": "application/json"}
    )
    assert_envelope(bad_json, 400)
    assert_envelope(httpx.post(url, json={"focus": 3}, headers=ADMIN), 400, "focus")


def test_compress_after_a_restart_runs_on_the_sessions_next_request(
    sim: Simulator, db_path: str
) -> None:
    settings = admin_settings(sim, db_path)
    with ProxyServer(settings) as first:
        loop = grow_compressed(sim, first, session_id="held-elsewhere")
    with ProxyServer(settings) as restarted:
        url = session_url(restarted, scope_for(AGENT_KEY), "held-elsewhere")
        asked = httpx.post(url + "/compress", json={"focus": "module_3"}, headers=ADMIN)
        assert asked.status_code == 202, asked.text
        assert asked.json()["outcome"] == "scheduled"
        before = httpx.get(url, headers=ADMIN).json()
        summaries = len(sim.summary_requests)
        loop.client = client(restarted)
        loop.step(100)
        loop.step(101)  # asked for once: the request after runs no second manual compression
        flushed(restarted)
        after = httpx.get(url, headers=ADMIN).json()
    manual = [e for e in after["events"][len(before["events"]) :] if e["trigger"] == "manual"]
    assert len(manual) == 1
    assert manual[0]["outcome"] in ("compressed", "fallback")
    assert "module_3" in str(sim.summary_requests[summaries].body["messages"])


def test_held_requests_are_bounded_by_bytes(sim: Simulator, db_path: str) -> None:
    settings = admin_settings(sim, db_path)
    settings = replace(settings, server=replace(settings.server, held_request_bytes=4_000))
    with ProxyServer(settings) as proxy:
        for n in range(6):
            chat(proxy, f"bounded-{n}", words=200)  # ~1 KB bodies
        flushed(proxy)
        sessions = proxy.services.sessions
        assert 0 < sessions.held_size <= 4_000
        assert len(sessions.held) < 6 == len([k for k in sessions.marks if "bounded" in k.key])
        oldest = session_url(proxy, scope_for(AGENT_KEY), "bounded-0", "/compress")
        assert httpx.post(oldest, headers=ADMIN).status_code == 202
        newest = session_url(proxy, scope_for(AGENT_KEY), "bounded-5", "/compress")
        assert httpx.post(newest, headers=ADMIN).status_code == 200


def test_delete_removes_the_session_and_its_archive(sim: Simulator, proxy: ProxyServer) -> None:
    grow_compressed(sim, proxy)
    chat(proxy, "keep-me", words=10)
    flushed(proxy)
    url = session_url(proxy, scope_for(AGENT_KEY), SESSION)
    assert httpx.get(url + "/archive", headers=ADMIN).json()["data"]
    deleted = httpx.delete(url, headers=ADMIN)
    assert deleted.status_code == 200
    assert deleted.json() == {"scope": scope_for(AGENT_KEY), "key": SESSION, "deleted": True}
    assert_envelope(httpx.get(url, headers=ADMIN), 404)
    assert_envelope(httpx.get(url + "/archive", headers=ADMIN), 404)
    assert_envelope(httpx.post(url + "/compress", headers=ADMIN), 404)
    assert_envelope(httpx.delete(url, headers=ADMIN), 404)
    listed = httpx.get(f"{root(proxy)}/admin/sessions", headers=ADMIN).json()
    assert [s["key"] for s in listed["data"]] == ["keep-me"]
    sk = SessionKey(scope_for(AGENT_KEY), SESSION)
    assert proxy.run(proxy.services.store.archived_messages(sk)) == []


# -- schema ------------------------------------------------------------------------------------


def test_admin_routes_are_in_the_openapi_schema(proxy: ProxyServer) -> None:
    schema = httpx.get(f"{root(proxy)}/openapi.json").json()
    paths = schema["paths"]
    assert set(paths["/admin/sessions"]) == {"get"}
    assert set(paths["/admin/sessions/{scope}/{key}"]) == {"get", "delete"}
    assert set(paths["/admin/sessions/{scope}/{key}/archive"]) == {"get"}
    assert set(paths["/admin/sessions/{scope}/{key}/compress"]) == {"post"}
    assert set(paths["/admin/sessions/{scope}/{key}/activity"]) == {"get"}
    order = next(p for p in paths["/admin/sessions"]["get"]["parameters"] if p["name"] == "order")
    assert order["schema"]["enum"] == ["last_activity", "tokens"]
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "/dashboard" not in paths
