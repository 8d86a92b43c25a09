"""Derived session ids: conversations that open identically (aider's) but ask different things
are told apart, and a conversation keeps its id as it grows."""

from __future__ import annotations

import hashlib
from typing import Any

import openai
import orjson

from session.identity import derived_session_id
from tests.compression import aider
from tests.compression.builders import agent_session
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

TASK_A = ["Add retries with exponential backoff to fetch() in net/client.py."]
TASK_A += [f"Now make attempt {n} log its delay." for n in range(1, 6)]
TASK_B = ["Rename Session to HttpSession everywhere.", "Update the README too."]


def growing(asks: list[str]) -> list[list[dict[str, Any]]]:
    """Every request of one aider conversation, the format reminder on the newest message."""
    return [aider.request(asks[:made], reminder=True) for made in range(1, len(asks) + 1)]


def test_conversations_with_the_same_opening_get_different_ids() -> None:
    a, b = growing(TASK_A)[0], growing(TASK_B)[0]
    assert a[:7] == b[:7]  # the canned opening, identical
    assert derived_session_id(a) != derived_session_id(b)


def test_a_conversation_keeps_its_id_as_it_grows() -> None:
    for asks in (TASK_A, TASK_B):
        ids = {derived_session_id(messages) for messages in growing(asks)}
        assert len(ids) == 1


def test_ids_of_conversations_without_a_canned_opening_are_unchanged() -> None:
    messages = agent_session(rounds=2)
    opening = [["system", messages[0]["content"]], ["user", messages[1]["content"]]]
    digest = hashlib.sha256(orjson.dumps(opening, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert derived_session_id(messages) == "auto-" + digest[:24]


def test_ctxgate_names_two_aider_conversations_apart(sim: Simulator, db_path: str) -> None:
    with ProxyServer(settings_for(sim.base_url, db_path)) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-aider", max_retries=0)
        seen: dict[str, set[str]] = {}
        for name, asks in (("a", TASK_A[:3]), ("b", TASK_B)):
            for messages in growing(asks):
                raw = client.chat.completions.with_raw_response.create(
                    model="gpt-4o-mini",
                    messages=messages,  # type: ignore[arg-type]
                )
                seen.setdefault(name, set()).add(raw.headers["x-session-id"])
    assert len(seen["a"]) == len(seen["b"]) == 1
    assert seen["a"] != seen["b"]
