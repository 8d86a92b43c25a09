"""The recall tool through a real ctxgate: the model reads back what a compression archived.

A conversation planted with a fact is compressed at an 8K window; then the user asks about the
fact. The simulator plays a model that calls `ctxgate_recall` when the fact is not in its view
and answers from the tool's result. The client (the openai SDK) must get only the final answer;
the upstream must have received the recall exchange with the archived original in it.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import openai
import pytest

from session.identity import scope_for
from session.ports.frontdoor import ToolCall
from session.recall.tool import Archive
from storage import SessionKey, SessionStore
from tests.compression.counters import CharCounter
from tests.servers import ProxyServer, settings_for
from tests.simulator import Fail, ModelSpec, Reply, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture
from tests.storage.factories import chain_digests, commit

WINDOW = 8192
MODEL = "recall-8k"
FACT = "the blue lagoon room"
TOOL = "ctxgate_recall"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def history() -> list[dict[str, Any]]:
    """A coding session whose third tool result holds the fact, then long reads past it."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent in /srv/app."},
        {"role": "user", "content": "Tidy the handlers and tell me where the review happens."},
    ]
    for step in range(14):
        text = f"notes for module {step}: " + " ".join(
            f"handler_{step}_{n} returns process(request, retries={n % 7})" for n in range(60)
        )
        if step == 2:
            text = f"REVIEW.md: the design review happens in {FACT} on the third floor.\n" + text
        call = {
            "id": f"call_{step}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"m{step}.py"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{step}", "content": text})
    messages.append({"role": "user", "content": "Where does the design review happen?"})
    return messages


def offered(body: dict[str, Any]) -> bool:
    return any((t.get("function") or {}).get("name") == TOOL for t in body.get("tools") or [])


def recalling_model(body: dict[str, Any]) -> Reply | None:
    """Calls the recall tool when the fact is out of view; answers from its result."""
    if is_summary_request(body):
        return None
    messages = body["messages"]
    last = messages[-1]
    if last.get("role") == "tool" and FACT in str(last.get("content")):
        return Reply(content=f"The design review happens in {FACT}.")
    if FACT in json.dumps(messages):
        return Reply(content=f"Found in view: {FACT}.")
    if offered(body):
        return Reply(tool_calls=[{"name": TOOL, "arguments": {"query": "design review"}}])
    return Reply(content="I do not know.")


sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, responder=lambda: recalling_model, validate_messages=True
)


def proxy_for(sim: Simulator, tmp_path: Any, **recall: Any) -> ProxyServer:
    """ctxgate with the given recall settings; recall before asking is off unless asked for:
    these tests are about the model's own calls."""
    recall = {"ahead": False, **recall}
    settings = settings_for(
        sim.base_url,
        str(tmp_path / "recall.db"),
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        compression={"background": False, "recall": recall},
        auth={"admin_key": "adm"},
    )
    return ProxyServer(settings)


def session_events(proxy: ProxyServer) -> list[dict[str, Any]]:
    """The session's events through the admin API (the recall event is written after the
    answer: wait for it)."""
    url = f"{proxy.base_url.removesuffix('/v1')}/admin/sessions/{scope_for('sk-recall')}/recall"
    for _ in range(50):
        events = httpx.get(url, headers={"Authorization": "Bearer adm"}).json()["events"]
        if any(e["trigger"] == "recall" for e in events):
            break
        time.sleep(0.05)
    return list(events)


def client_for(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-recall", max_retries=0)


def ask(client: openai.OpenAI, stream: bool) -> tuple[str, Any, dict[str, str]]:
    """The final text, the tool calls the client saw, and the response headers."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": history(),
        "tools": TOOLS,
        "extra_headers": {"X-Session-Id": "recall"},
    }
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        message = raw.parse().choices[0].message
        return message.content or "", message.tool_calls, dict(raw.headers)
    with client.chat.completions.with_streaming_response.create(stream=True, **kwargs) as raw:
        text, calls = "", []
        for chunk in raw.parse():
            for choice in chunk.choices:
                text += choice.delta.content or ""
                calls += choice.delta.tool_calls or []
        return text, calls or None, dict(raw.headers)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_the_model_reads_back_a_compressed_fact(
    sim: Simulator, tmp_path: Any, stream: bool
) -> None:
    with proxy_for(sim, tmp_path) as proxy:
        text, calls, headers = ask(client_for(proxy), stream)
        events = session_events(proxy)
    assert text == f"The design review happens in {FACT}."
    recalls = [e for e in events if e["trigger"] == "recall"]
    assert [(e["outcome"], e["messages_after"] - e["messages_before"]) for e in recalls] == [
        ("answered", 2)
    ]
    assert recalls[0]["tokens_before"] > 0  # tokens of archived text read back
    assert calls is None  # the client never sees ctxgate's tool
    assert headers["x-ctxgate-compressed"] == "true"
    assert headers["x-ctxgate-recalls"] == "1"
    turns = [r.body for r in sim.received if r.body and not r.is_summary]
    first, second = turns[-2], turns[-1]
    assert offered(first) and FACT not in json.dumps(first["messages"])
    # The compacted view names its handles; the second round holds the archived original.
    assert "[Archived originals: m" in json.dumps(first["messages"])
    call, result = second["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == TOOL
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert re.search(r"^- m\d+ \(tool result for call_2\)", result["content"], re.M)
    assert all(r.problems == [] for r in sim.received)


def test_a_handle_reads_the_whole_original(sim: Simulator, tmp_path: Any) -> None:
    def by_handle(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body) or not offered(body):
            return None
        last = body["messages"][-1]
        if last.get("role") == "tool":
            return Reply(content=str(last["content"]))
        text = json.dumps(body["messages"])
        found = re.search(r"\[archived: (m\d+)\]", text) or re.search(r"originals: (m\d+)", text)
        assert found is not None
        return Reply(tool_calls=[{"name": TOOL, "arguments": {"handle": found.group(1)}}])

    sim.responder = by_handle
    with proxy_for(sim, tmp_path) as proxy:
        text, _, _ = ask(client_for(proxy), stream=False)
    position = int(re.match(r"m(\d+) ", text).group(1))  # type: ignore[union-attr]
    original = history()[position]
    assert text.endswith(str(original.get("content") or ""))


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_calls_past_the_budget_never_reach_the_client(
    sim: Simulator, tmp_path: Any, stream: bool
) -> None:
    def insists(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body) or not offered(body):
            return None
        last = str(body["messages"][-1].get("content"))
        return Reply(
            content="Still looking." if "No more recall" in last else None,
            tool_calls=[{"name": TOOL, "arguments": {"query": "review"}}],
        )

    sim.responder = insists
    with proxy_for(sim, tmp_path, max_rounds=2) as proxy:
        text, calls, headers = ask(client_for(proxy), stream)
    assert calls is None
    assert text == "Still looking."
    assert headers["x-ctxgate-recalls"] == "2"
    rounds = [r.body for r in sim.received if r.body and not r.is_summary][-3:]
    assert all(offered(body) for body in rounds)
    assert "No more recall in this request" in rounds[-1]["messages"][-1]["content"]


def test_the_client_keeps_its_own_tool_calls_after_text(sim: Simulator, tmp_path: Any) -> None:
    """A stream that starts with text is the client's: a recall call after it is hidden, the
    client's own call is kept with its index renumbered."""

    def mixed(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body) or not offered(body):
            return None
        return Reply(
            content="Let me look.",
            tool_calls=[
                {"name": TOOL, "arguments": {"query": "review"}},
                {"name": "read_file", "arguments": {"path": "REVIEW.md"}},
            ],
        )

    sim.responder = mixed
    with proxy_for(sim, tmp_path) as proxy:
        text, calls, headers = ask(client_for(proxy), stream=True)
    assert text == "Let me look."
    assert [(c.index, c.function.name) for c in calls if c.function and c.function.name] == [
        (0, "read_file")
    ]
    assert "x-ctxgate-recalls" not in headers


def test_recall_off_offers_no_tool_and_names_no_handles(sim: Simulator, tmp_path: Any) -> None:
    with proxy_for(sim, tmp_path, enabled=False) as proxy:
        text, _, headers = ask(client_for(proxy), stream=False)
    assert text == "I do not know."
    assert headers["x-ctxgate-compressed"] == "true"
    body = [r.body for r in sim.received if r.body and not r.is_summary][-1]
    assert not offered(body)
    assert "archived" not in json.dumps(body["messages"]).lower()


def test_tool_choice_none_is_respected(sim: Simulator, tmp_path: Any) -> None:
    with proxy_for(sim, tmp_path) as proxy:
        client_for(proxy).chat.completions.create(
            model=MODEL,
            messages=history(),  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            tool_choice="none",
            extra_headers={"X-Session-Id": "recall"},
        )
    body = [r.body for r in sim.received if r.body and not r.is_summary][-1]
    assert not offered(body)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_a_failing_round_falls_back_to_the_request_without_recall(
    sim: Simulator, tmp_path: Any, stream: bool
) -> None:
    """The model asked for the archive and the round failed: it answers the client's request
    as sent, without the tool (not an empty answer holding only the hidden call)."""

    def breaks(body: dict[str, Any]) -> Reply | Fail | None:
        if is_summary_request(body):
            return None
        if not offered(body):
            return Reply(content="Answered without the archive.")
        if body["messages"][-1].get("role") == "tool":
            return Fail(503)
        return Reply(tool_calls=[{"name": TOOL, "arguments": {"query": "review"}}])

    sim.responder = breaks
    with proxy_for(sim, tmp_path) as proxy:
        text, calls, headers = ask(client_for(proxy), stream)
    assert calls is None
    assert text == "Answered without the archive."
    assert "x-ctxgate-recalls" not in headers
    turns = [r for r in sim.received if r.body and not r.is_summary]
    assert [r.status for r in turns[-3:]] == [200, 503, 200]
    assert offered(turns[-3].body) and not offered(turns[-1].body)
    assert turns[-1].body["messages"] == turns[-3].body["messages"]


@pytest.mark.parametrize(
    ("arguments", "note"),
    [
        ({"query": "REVIEW.md:"}, ""),  # punctuation after an id or a path is not part of it
        (
            {"handle": "the review notes", "query": "REVIEW.md."},
            "`the review notes` is not a handle; searched for the query.",
        ),
        ({"handle": "REVIEW.md"}, "`REVIEW.md` is not a handle; searched for it as words."),
    ],
    ids=["trailing-colon", "handle-beside-a-query", "words-as-a-handle"],
)
def test_a_search_finds_what_the_arguments_name(
    sim: Simulator, tmp_path: Any, arguments: dict[str, str], note: str
) -> None:
    """The model's arguments are read leniently; the answer says what was done."""

    def searching(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body) or not offered(body):
            return None
        last = body["messages"][-1]
        if last.get("role") == "tool":
            return Reply(content=str(last["content"]))
        return Reply(tool_calls=[{"name": TOOL, "arguments": arguments}])

    sim.responder = searching
    with proxy_for(sim, tmp_path) as proxy:
        text, _, headers = ask(client_for(proxy), stream=False)
    assert headers["x-ctxgate-recalls"] == "1"
    lines = text.splitlines()
    if note:
        assert lines.pop(0) == note
    assert lines[0].startswith("Archived messages matching")
    assert re.match(r"- m\d+ \(tool result for call_2\): .*REVIEW\.md", lines[1])


async def test_a_search_shows_where_the_words_meet(tmp_path: Any) -> None:
    """The snippet is taken where most of the query's words fall together, not at the first
    place one of them appears (a path naming 'backup' long before the answer)."""
    noise = "config read from /etc/backup/passwd and /srv/backup.tar; " * 20
    sk = SessionKey("scope", "words")
    archived = [
        (4, {"role": "tool", "tool_call_id": "c4", "content": noise}),
        (
            7,
            {
                "role": "tool",
                "tool_call_id": "c7",
                "content": noise + "The backup of the north gate uses code NG-7731.",
            },
        ),
    ]
    store = await SessionStore.open(f"sqlite+aiosqlite:///{tmp_path}/archive.db")
    try:
        digests = chain_digests(archived)
        await store.commit_compression(commit(sk, digests, 2, archived=archived))
        archive = Archive(store, sk)
        found = await archive.search("north gate backup code", 500, CharCounter())
        fetched = await archive.fetch("m4", 500, CharCounter())
        missing = await archive.fetch("m5", 500, CharCounter())
    finally:
        await store.close()
    first = found.splitlines()[1]
    assert first.startswith("- m7 (tool result for c7):") and "NG-7731" in first
    assert fetched.startswith("m4 (tool result for c4):\n")
    assert "Nothing is archived under m5" in missing


async def test_a_handle_and_a_query_get_both(tmp_path: Any) -> None:
    """A handle sent with a query: the handle's original, and the query's hits when that
    original does not hold the query; every combination says what was done."""
    sk = SessionKey("scope", "both")
    archived = [
        (4, {"role": "tool", "tool_call_id": "c4", "content": "ls output: a.py b.py c.py"}),
        (5, {"role": "tool", "tool_call_id": "c5", "content": "the gate code is NG-7731"}),
        (6, {"role": "user", "content": "Deploy to the staging cluster eu-west-9 tonight."}),
    ]
    store = await SessionStore.open(f"sqlite+aiosqlite:///{tmp_path}/archive.db")
    answers: dict[str, str] = {}
    try:
        await store.commit_compression(commit(sk, chain_digests(archived), 2, archived=archived))
        archive = Archive(store, sk)
        cases = {
            "searched": {"handle": "m4", "query": "gate code"},
            "held": {"handle": "m5", "query": "gate code"},
            "range": {"handle": "m4-m6", "query": "staging cluster"},
            "nothing there": {"handle": "m40", "query": "staging cluster"},
            "words as a handle": {"handle": "staging cluster"},
            "bad handle, query": {"handle": "the notes", "query": "gate code"},
            "query": {"query": "gate code"},
            "handle": {"handle": "m6"},
        }
        for name, arguments in cases.items():
            call = ToolCall(id="r1", name="ctxgate_recall", arguments=json.dumps(arguments))
            answers[name], _ = await archive.answer(call, 800, CharCounter())
    finally:
        await store.close()
    searched = answers["searched"]
    assert searched.startswith("m4 does not hold 'gate code'")
    assert "m4 (tool result for c4):\nls output" in searched
    assert "- m5 (tool result for c5): the gate code is NG-7731" in searched
    assert "- m4 " not in searched  # the handle's own message is not a hit again
    assert answers["held"].startswith("m5 holds 'gate code'; its original:\nm5 (tool result")
    assert answers["range"].startswith("m4-m6 holds 'staging cluster'")
    assert "eu-west-9" in answers["range"]
    assert answers["nothing there"].startswith("Nothing is archived under m40; searched")
    assert "- m6 (user): Deploy to the staging cluster" in answers["nothing there"]
    assert answers["words as a handle"].startswith("`staging cluster` is not a handle")
    assert answers["bad handle, query"].startswith("`the notes` is not a handle; searched for")
    assert "NG-7731" in answers["bad handle, query"] and "NG-7731" in answers["query"]
    assert answers["handle"].startswith("m6 (user):\nDeploy")
