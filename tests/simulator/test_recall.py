"""The simulator's recall model (tests/simulator/recall_model.py) over real HTTP, as a client of
the recall tool would see it: it answers a planted-fact question from the view, calls
`ctxgate_recall` with a query when the fact is gone, reads a handle a search result or a
rewritten message points at, answers from what the tool returned, streamed or not."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.simulator import Reply, Simulator
from tests.simulator.fixtures import client as client
from tests.simulator.fixtures import reset_simulator as reset_simulator
from tests.simulator.fixtures import sim as sim
from tests.simulator.recall_model import (
    RECALL_TOOL,
    RecallModel,
    fact_question,
    fact_sentence,
)
from tests.simulator.testing import user

CODE = "NEEDLE-00c0ffee42"
FACT = fact_sentence("access code", "the north gate", CODE)
QUESTION = fact_question("access code", "the north gate")
RECALL = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL,
        "description": "Read archived originals.",
        "parameters": {
            "type": "object",
            "properties": {"handle": {"type": "string"}, "query": {"type": "string"}},
        },
    },
}


def _ask(
    client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool, tools: bool = True
) -> tuple[str, list[dict[str, Any]]]:
    """(text, tool calls as {name, arguments}) of one answer."""
    kwargs: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        kwargs["tools"] = [RECALL]
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        calls = [
            {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        return message.content or "", calls
    text, names, arguments = [], [], []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for call in choice.delta.tool_calls or []:
                if call.function and call.function.name:
                    names.append(call.function.name)
                    arguments.append("")
                if call.function and call.function.arguments:
                    arguments[-1] += call.function.arguments
    calls = [{"name": n, "arguments": json.loads(a)} for n, a in zip(names, arguments, strict=True)]
    return "".join(text), calls


def _after_call(arguments: dict[str, str], result: str) -> list[dict[str, Any]]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": RECALL_TOOL, "arguments": json.dumps(arguments)},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": result},
    ]


@pytest.fixture(autouse=True)
def recall_model(sim: Simulator, reset_simulator: None) -> None:
    sim.responder = RecallModel(other=lambda body: Reply(content="other"))


@pytest.mark.parametrize("stream", [False, True])
def test_a_fact_in_view_is_answered_directly(client: openai.OpenAI, stream: bool) -> None:
    text, calls = _ask(client, [user(f"Remember this. {FACT}"), user(QUESTION)], stream)
    assert calls == [] and CODE in text


@pytest.mark.parametrize("stream", [False, True])
def test_a_fact_out_of_view_is_searched_then_read_then_answered(
    client: openai.OpenAI, stream: bool
) -> None:
    view = [user("[Archived originals: m2-m40 — …]\nSummary of earlier work."), user(QUESTION)]
    text, calls = _ask(client, view, stream)
    assert text == ""
    assert calls == [
        {"name": RECALL_TOOL, "arguments": {"query": "access code for the north gate"}}
    ]

    listing = (
        "Archived messages matching 'access code for the north gate', best first:\n"
        "- m17 (user): …the access code for the north gate is…\n- m30 (tool): gate logs"
    )
    view += _after_call(calls[0]["arguments"], listing)
    text, calls = _ask(client, view, stream)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"handle": "m17"}}]

    view += _after_call({"handle": "m17"}, f"m17 (user):\nPlease note. {FACT}")
    text, calls = _ask(client, view, stream)
    assert calls == [] and CODE in text


def test_a_rewritten_message_that_mentions_the_subject_is_read_by_its_handle(
    client: openai.OpenAI,
) -> None:
    clipped = "Notes about the north gate …\n[archived: m12]"
    text, calls = _ask(client, [user(clipped), user(QUESTION)], stream=False)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"handle": "m12"}}]


def test_without_the_tool_or_after_a_fruitless_search_it_says_so(client: openai.OpenAI) -> None:
    text, calls = _ask(client, [user("Nothing here."), user(QUESTION)], False, tools=False)
    assert calls == [] and "not in this conversation" in text

    view = [user("Nothing here."), user(QUESTION)]
    view += _after_call({"query": "access code for the north gate"}, "No archived message.")
    text, calls = _ask(client, view, stream=False)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"query": "north gate"}}]
    view += _after_call({"query": "north gate"}, "No archived message matches 'north gate'.")
    text, calls = _ask(client, view, stream=False)
    assert calls == [] and "not in this conversation" in text


def test_a_code_a_snippet_cut_short_is_read_in_full_first(client: openai.OpenAI) -> None:
    listing = "- m17 (user): …note. The access code for the north gate is NEEDLE-00c0…"
    view = [user("Summary."), user(QUESTION), *_after_call({"query": "q"}, listing)]
    text, calls = _ask(client, view, stream=False)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"handle": "m17"}}]


def test_of_two_copies_in_view_the_whole_code_is_answered(client: openai.OpenAI) -> None:
    carried = "- The access code for the north gate is N\n- next line"
    view = [user(carried), user(f"Earlier: {FACT}"), user(QUESTION)]
    text, calls = _ask(client, view, stream=False)
    assert calls == [] and CODE in text


def test_the_best_hit_is_read_when_no_snippet_shows_the_subject(client: openai.OpenAI) -> None:
    listing = "- m40 (user): …backup:x:34:34:backup…\n- m9 (tool): …gate…"
    first = {"query": "access code for the north gate"}
    view = [user("Summary."), user(QUESTION), *_after_call(first, listing)]
    text, calls = _ask(client, view, stream=False)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"handle": "m40"}}]

    view += _after_call({"handle": "m40"}, "m40 (user):\nbackup:x:34:34:backup")
    text, calls = _ask(client, view, stream=False)
    assert calls == [{"name": RECALL_TOOL, "arguments": {"query": "north gate"}}]


def test_other_requests_go_to_the_wrapped_responder(client: openai.OpenAI) -> None:
    text, calls = _ask(client, [user("What is 2 + 2?")], stream=False)
    assert (text, calls) == ("other", [])
