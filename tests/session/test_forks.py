"""Conversations that share an opening and then diverge keep separate lineages.

Two runs of one task without a session header (same system prompt and first user message, so
the same derived session), a rewind (an edited earlier message), and a rewind inside one
explicit session id: each branch must get its own checkpoints, engine state and archive. The
simulator plays a model that reads the archive back with `ctxgate_recall` when asked where
the design review happens, and answers with what the tool returned: what the client gets
shows whose archive it read.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from session.identity import scope_for
from tests.servers import ProxyServer, settings_for
from tests.session.test_recall import TOOLS
from tests.simulator import ModelSpec, Reply, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture

WINDOW = 8192
MODEL = "fork-8k"
TOOL = "ctxgate_recall"
KEY = "sk-forks"
QUESTION = "Where does the design review happen?"
FACT_A = "the blue lagoon room"
FACT_B = "the red canyon hall"
FACT_A2 = "the green valley annex"
# Position of the step-2 tool result: system, user, then an (assistant, tool) pair per step.
FACT_POSITION = 7


def conversation(tag: str, facts: dict[int, str], steps: int = 14) -> list[dict[str, Any]]:
    """A coding session whose tool results at the given steps name where the review is."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent in /srv/app."},
        {"role": "user", "content": "Tidy the handlers and tell me where the review happens."},
    ]
    for step in range(steps):
        text = f"{tag} notes for module {step}: " + " ".join(
            f"handler_{step}_{n} returns process(request, retries={n % 7})" for n in range(60)
        )
        if step in facts:
            text = f"REVIEW.md: the design review happens in {facts[step]}.\n" + text
        call = {
            "id": f"{tag}_call_{step}",
            "type": "function",
            "function": {
                "name": "read_file",
                "arguments": json.dumps({"path": f"{tag}/m{step}.py"}),
            },
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"{tag}_call_{step}", "content": text})
    return messages


def offered(body: dict[str, Any]) -> bool:
    return any((t.get("function") or {}).get("name") == TOOL for t in body.get("tools") or [])


def archive_reader(recall: dict[str, str]) -> Any:
    """A model that answers the question with what `ctxgate_recall` returns (`recall`: the
    tool's arguments) and anything else with "Noted."."""

    def respond(body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            return None
        messages = body["messages"]
        last = messages[-1]
        if last.get("role") == "tool" and messages[-2].get("tool_calls"):
            if messages[-2]["tool_calls"][0]["function"]["name"] == TOOL:
                return Reply(content="ARCHIVE: " + str(last.get("content")))
        if last.get("content") == QUESTION and offered(body):
            return Reply(tool_calls=[{"name": TOOL, "arguments": recall}])
        return Reply(content="Noted.")

    return respond


sim = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def proxy_for(sim: Simulator, db_path: str) -> ProxyServer:
    settings = settings_for(
        sim.base_url,
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        # The model reads the archive itself: recall before asking would answer for it.
        compression={"background": False, "recall": {"ahead": False}},
        auth={"admin_key": "adm"},
    )
    return ProxyServer(settings)


def send(
    proxy: ProxyServer, messages: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        extra_headers=headers or {},
    )
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


def recall_round(body: dict[str, Any]) -> bool:
    """A request whose last message answers ctxgate's recall call."""
    calls = body["messages"][-2].get("tool_calls") or []
    return bool(calls) and calls[0]["function"]["name"] == TOOL


def ask(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        *history,
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": QUESTION},
    ]


def ordinary(sim: Simulator) -> list[dict[str, Any]]:
    return [r.body for r in sim.received if r.body and not r.is_summary]


def test_parallel_runs_of_one_task_read_their_own_archive(sim: Simulator, db_path: str) -> None:
    """Runs A and B share the opening (one derived session) and diverge right after it; each
    is compressed on arrival. A's handle m7 must read A's original, not B's."""
    sim.responder = archive_reader({"handle": f"m{FACT_POSITION}"})
    a = conversation("a", {2: FACT_A})
    b = conversation("b", {2: FACT_B})
    with proxy_for(sim, db_path) as proxy:
        _, first = send(proxy, a)
        _, second = send(proxy, b)
        answer_a, headers_a = send(proxy, ask(a))
        answer_b, _ = send(proxy, ask(b))
    assert first["x-session-id"] == second["x-session-id"]  # one derived session
    assert first["x-ctxgate-compressed"] == second["x-ctxgate-compressed"] == "true"
    assert headers_a["x-ctxgate-recalls"] == "1"
    assert FACT_A in answer_a and FACT_B not in answer_a
    assert FACT_B in answer_b and FACT_A not in answer_b
    # What the upstream received for A's recall round holds A's original only.
    rounds = [body["messages"] for body in ordinary(sim) if recall_round(body)]
    assert len(rounds) == 2
    assert FACT_A in rounds[0][-1]["content"] and FACT_B not in json.dumps(rounds[0])
    assert FACT_B in rounds[1][-1]["content"] and FACT_A not in json.dumps(rounds[1])


def test_an_edited_earlier_message_does_not_search_the_abandoned_branch(
    sim: Simulator, db_path: str
) -> None:
    """The client rewinds to before step 2 and continues differently (the edited branch is
    shorter): a search of the archive must not find what only the abandoned branch held."""
    sim.responder = archive_reader({"query": "design review"})
    original = conversation("a", {2: FACT_A, 12: FACT_A2}, steps=20)
    edited = conversation("a", {2: FACT_B}, steps=12)
    assert original[:FACT_POSITION] == edited[:FACT_POSITION]
    with proxy_for(sim, db_path) as proxy:
        send(proxy, original)
        send(proxy, edited)
        answer, headers = send(proxy, ask(edited))
    assert headers["x-ctxgate-recalls"] == "1"
    assert FACT_B in answer
    assert FACT_A2 not in answer and FACT_A not in answer


@pytest.mark.parametrize("header", ["x-claude-code-session-id", "x-session-id"])
def test_a_rewind_within_one_session_id_keeps_both_branches(
    sim: Simulator, db_path: str, header: str
) -> None:
    """Inside one explicit session: the original branch goes on after the rewind, and each
    branch's recall keeps reading its own originals, whichever was compressed last."""
    sim.responder = archive_reader({"handle": f"m{FACT_POSITION}"})
    original = conversation("a", {2: FACT_A})
    edited = conversation("a", {2: FACT_B})
    headers = {header: "cc-session-1"}
    with proxy_for(sim, db_path) as proxy:
        send(proxy, original, headers)
        send(proxy, edited, headers)
        answer_original, _ = send(proxy, ask(original), headers)
        answer_edited, _ = send(proxy, ask(edited), headers)
        listed = httpx.get(
            f"{proxy.base_url.removesuffix('/v1')}/admin/sessions",
            params={"scope": scope_for(KEY)},
            headers={"Authorization": "Bearer adm"},
        )
    assert FACT_A in answer_original and FACT_B not in answer_original
    assert FACT_B in answer_edited and FACT_A not in answer_edited
    # The admin API lists the edited branch as a lineage of the session.
    rows = {row["key"]: row for row in listed.json()["data"]}
    (fork_key,) = [key for key in rows if key != "cc-session-1"]
    assert fork_key.startswith("cc-session-1#")
    assert rows[fork_key]["root_key"] == "cc-session-1"
    assert rows[fork_key]["compression_count"] == rows["cc-session-1"]["compression_count"] == 1


def test_a_rewind_after_a_compression_reads_the_archive_it_shares(
    sim: Simulator, db_path: str
) -> None:
    """The original branch was compressed and went on; the client rewinds to the compressed
    prefix and continues differently. The new branch uses the shared checkpoint and reads
    the originals it replaced, not the abandoned branch's later ones."""
    sim.responder = archive_reader({"handle": f"m{FACT_POSITION}"})
    original = conversation("a", {2: FACT_A})
    longer = conversation("a", {2: FACT_A}, steps=16)
    rewound = [*original, *conversation("z", {}, steps=16)[len(original) :]]
    headers = {"x-session-id": "rewind"}
    with proxy_for(sim, db_path) as proxy:
        _, first = send(proxy, original, headers)
        send(proxy, longer, headers)
        _, branched = send(proxy, rewound, headers)
        answer, _ = send(proxy, ask(rewound), headers)
        listed = httpx.get(
            f"{proxy.base_url.removesuffix('/v1')}/admin/sessions",
            params={"scope": scope_for(KEY)},
            headers={"Authorization": "Bearer adm"},
        ).json()["data"]
    assert first["x-ctxgate-compressed"] == "true"
    assert branched["x-ctxgate-compressed"] == "true"
    assert FACT_A in answer
    forks = [row for row in listed if row["key"] != "rewind"]
    assert [(row["fork_of"], row["fork_len"]) for row in forks] == [("rewind", len(original))]
