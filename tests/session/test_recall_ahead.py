"""Recall before asking: what the newest turn names comes back into view before forwarding.

The conversation of tests/session/test_recall.py (a fact planted in an early tool result, then
long reads past it) is compressed at an 8K window. The user then names the file that held the
fact, or asks about it in words; the simulated model answers from its view only, never calling
the recall tool. ctxgate must have put the archived passage, with its handle, at the end of
the request: the earlier messages, and so the provider's cached prefix, unchanged; on the next
request the placement stays where it was put and is not put in twice.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest

from session.identity import scope_for
from session.recall.ahead import passage, strongest
from storage import ArchivedMessage, search_terms
from tests.servers import ProxyServer, settings_for
from tests.session.test_recall import (
    FACT,
    MODEL,
    WINDOW,
    client_for,
    history,
    proxy_for,
)
from tests.simulator import InViewModel, ModelSpec, Reply, Simulator, is_summary_request
from tests.simulator.fixtures import simulator_fixture


def from_view_only(body: dict[str, Any]) -> Reply | None:
    """A model that never recalls: it answers from what its view holds."""
    if is_summary_request(body):
        return None
    if FACT in json.dumps(body["messages"]):
        return Reply(content=f"From view: {FACT}.")
    return Reply(content="I do not know.")


sim = simulator_fixture(
    {MODEL: ModelSpec(window=WINDOW)}, responder=lambda: from_view_only, validate_messages=True
)


def ask(proxy: Any, messages: list[dict[str, Any]]) -> tuple[str, dict[str, str]]:
    raw = client_for(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"X-Session-Id": "ahead"},
    )
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


def ahead_events(proxy: Any) -> list[dict[str, Any]]:
    url = f"{proxy.base_url.removesuffix('/v1')}/admin/sessions/{scope_for('sk-recall')}/ahead"
    events = httpx.get(url, headers={"Authorization": "Bearer adm"}).json()["events"]
    return [e for e in events if e["trigger"] == "recall-ahead"]


def forwarded(sim: Simulator) -> list[dict[str, Any]]:
    return [r.body for r in sim.received if r.body and not r.is_summary and r.is_chat]


@pytest.mark.parametrize(
    "asked",
    ["Show me what REVIEW.md says, please.", "Where does the design review happen, again?"],
    ids=["names-a-file", "asks-in-words"],
)
def test_the_passage_the_turn_names_is_put_at_the_end(
    sim: Simulator, tmp_path: Any, asked: str
) -> None:
    with proxy_for(sim, tmp_path, ahead=True) as proxy:
        messages = history()
        messages[-1] = {"role": "user", "content": "Go on with the handlers."}
        ask(proxy, messages)  # compresses: the fact is archived
        before = forwarded(sim)[-1]["messages"]
        assert FACT not in json.dumps(before)
        messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": asked}]
        text, headers = ask(proxy, messages)
        sent = forwarded(sim)[-1]["messages"]
        assert text == f"From view: {FACT}."
        assert sent[: len(before)] == before  # the prefix the provider cached is untouched
        last = sent[-1]["content"]
        assert last.startswith(asked) and FACT in last
        placed = headers["x-ctxgate-recalled-ahead"]
        assert placed.startswith("m") and f"{placed.split(',')[0]} (tool)" in last
        # The next request: the placement stays where it was, once.
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok"}]
        _, later = ask(proxy, messages)
        again = forwarded(sim)[-1]["messages"]
        assert again[: len(sent)] == sent
        assert json.dumps(again).count("[ctxgate recalled archived") == 1
        assert "x-ctxgate-recalled-ahead" not in later
        events = ahead_events(proxy)
    # One placement, reported once: its passages and their tokens.
    assert [(e["outcome"], e["messages_after"]) for e in events] == [
        ("placed", len(placed.split(",")))
    ]
    assert events[0]["tokens_after"] > 0


def test_the_switch_turns_it_off(sim: Simulator, tmp_path: Any) -> None:
    with proxy_for(sim, tmp_path, ahead=False) as proxy:
        messages = history()
        messages[-1] = {"role": "user", "content": "Go on with the handlers."}
        ask(proxy, messages)
        messages += [
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Show me what REVIEW.md says, please."},
        ]
        text, headers = ask(proxy, messages)
    assert text == "I do not know." and "x-ctxgate-recalled-ahead" not in headers


def anthropic_history() -> list[dict[str, Any]]:
    """The same conversation as Claude Code sends it: tool_use and tool_result blocks."""
    out: list[dict[str, Any]] = []
    for message in history()[1:]:
        if message["role"] == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": message["content"]}]})
        elif message["role"] == "assistant":
            call = message["tool_calls"][0]
            block = {
                "type": "tool_use",
                "id": f"toolu_{call['id']}",
                "name": "read_file",
                "input": json.loads(call["function"]["arguments"]),
            }
            out.append({"role": "assistant", "content": [block]})
        else:
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{message['tool_call_id']}",
                "content": message["content"],
            }
            out.append({"role": "user", "content": [result]})
    return out


def test_on_the_messages_api_the_passage_ends_the_last_user_turn(
    sim: Simulator, tmp_path: Any
) -> None:
    tools = [
        {
            "name": "read_file",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]
    settings = settings_for(
        sim.base_url,
        str(tmp_path / "ahead.db"),
        api_key=None,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        compression={"background": False, "recall": {"ahead": True}},
        upstreams={"sim": {"base_url": sim.base_url, "apis": ["chat", "messages"]}},
    )
    with ProxyServer(settings) as proxy:
        client = anthropic.Anthropic(
            base_url=proxy.base_url.removesuffix("/v1"), api_key="sk-recall", max_retries=0
        )
        messages = anthropic_history()
        messages[-1] = {"role": "user", "content": [{"type": "text", "text": "Go on."}]}

        def send() -> tuple[str, dict[str, str]]:
            raw = client.messages.with_raw_response.create(
                model=MODEL,
                max_tokens=512,
                system="You are a coding agent in /srv/app.",
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                extra_headers={"X-Session-Id": "ahead-messages"},
            )
            blocks = raw.parse().content
            return "".join(b.text for b in blocks if b.type == "text"), dict(raw.headers)

        send()
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "What does REVIEW.md say?"}]},
        ]
        text, headers = send()
    sent = [r for r in sim.received if r.is_messages and not r.is_summary][-1].body["messages"]
    assert text == f"From view: {FACT}."
    assert "x-ctxgate-recalled-ahead" in headers
    last = sent[-1]["content"]
    assert last[0]["text"] == "What does REVIEW.md say?" and FACT in json.dumps(last)


def test_a_question_gets_the_passage_that_holds_most_of_its_words() -> None:
    def archived(position: int, text: str) -> ArchivedMessage:
        return ArchivedMessage(position, {"role": "tool", "content": text}, 1, 0.0)

    east = archived(4, "The access code for the east gate is NEEDLE-1.")
    north = archived(9, "The access code for the north gate is NEEDLE-2.")
    other = archived(12, "The gate log rotated.")
    terms = search_terms("What is the access code for the north gate?").distinct()
    assert strongest([east, north, other], terms) is north  # the search ranked east first
    assert strongest([other], terms) is None  # one shared word is no match


def test_a_questions_passage_holds_the_line_that_answers_it() -> None:
    """The passage is around the line holding most of the question's words, not where the
    first of them happens to be (an agent's reminder "… only." a few lines above)."""
    text = "\n".join(
        [
            "Reply with one command only.",
            "(Open file: /marshmallow-code__marshmallow/src/marshmallow/fields.py)",
            "(Current directory: /marshmallow-code__marshmallow)",
            "The access code for the backup router is NEEDLE-1.",
            "bash-$",
        ]
    )
    found = ArchivedMessage(7, {"role": "user", "content": text}, 1, 0.0)
    terms = search_terms(
        "What is the access code for the backup router? Reply with the access code only."
    ).distinct()
    assert strongest([found], terms) is found
    quoted = passage(found, terms)
    assert quoted.startswith("m7 (user): ") and "backup router is NEEDLE-1." in quoted


def test_the_lineages_placements_share_one_budget(sim: Simulator, tmp_path: Any) -> None:
    """Each placement stays in every later request until the next compression, so all of
    them together stay within `ahead_share` of the window (here 163 tokens); names a turn
    mentions in passing fill a third of it at most, the rest is kept for what the user asks."""
    with proxy_for(sim, tmp_path, ahead=True, ahead_share=0.02) as proxy:
        messages = history()
        messages[-1] = {"role": "user", "content": "Go on with the handlers."}
        ask(proxy, messages)
        headers = []
        for said in [
            "Show me what REVIEW.md says, please.",  # a name: its passage fits a third of the share
            "Now handler_5_3, please.",  # another name: the names' third is spent
            "What does handler_6_2 return in module 6?",  # a question: what is left
            "And in module 7, what does handler_7_2 return?",  # nothing left
        ]:
            messages += [
                {"role": "assistant", "content": "Done."},
                {"role": "user", "content": said},
            ]
            headers.append(ask(proxy, messages)[1].get("x-ctxgate-recalled-ahead"))
        events = ahead_events(proxy)
    assert [h is not None for h in headers] == [True, False, True, False]
    assert sum(e["tokens_after"] for e in events) <= int(WINDOW * 0.02)


def test_the_sessions_figure_leaves_the_placed_passages_out(sim: Simulator, tmp_path: Any) -> None:
    """A compression drops every placement, so placements must not be what triggers one: the
    session's figure, which the triggers read, is the provider's less the passages placed."""
    with proxy_for(sim, tmp_path, ahead=True) as proxy:
        messages = history()
        messages[-1] = {"role": "user", "content": "Go on with the handlers."}
        ask(proxy, messages)
        messages += [
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Show me what REVIEW.md says, please."},
        ]
        raw = client_for(proxy).chat.completions.with_raw_response.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": "ahead"},
        )
        billed = raw.parse().usage.prompt_tokens  # type: ignore[union-attr]
        assert "x-ctxgate-recalled-ahead" in raw.headers
        placed = sum(e["tokens_after"] for e in ahead_events(proxy))
        url = f"{proxy.base_url.removesuffix('/v1')}/admin/sessions/{scope_for('sk-recall')}/ahead"
        for _ in range(100):  # usage is written behind the answer
            session = httpx.get(url, headers={"Authorization": "Bearer adm"}).json()["session"]
            if session["request_count"] == 2:
                break
            time.sleep(0.05)
    assert placed > 0
    assert session["last_prompt_tokens"] == billed - placed


def test_a_tool_results_own_output_stays_last(sim: Simulator, tmp_path: Any) -> None:
    """A tool reports how it went at the end of its output (an exit status, `step N done`),
    and a model reads the end of the request most: passages go before the output, so no
    older text quoted from the archive is the last thing the model reads."""
    own = "grep: REVIEW.md: the file was moved\nstep 9 done"
    call = {
        "id": "call_grep",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": "REVIEW.md"})},
    }
    with proxy_for(sim, tmp_path, ahead=True) as proxy:
        messages = history()
        messages[-1] = {"role": "user", "content": "Go on with the handlers."}
        ask(proxy, messages)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_grep", "content": own},
        ]
        text, headers = ask(proxy, messages)
    last = forwarded(sim)[-1]["messages"][-1]
    assert "x-ctxgate-recalled-ahead" in headers and text == f"From view: {FACT}."
    assert last["role"] == "tool" and last["content"].endswith(own)
    assert last["content"].index(FACT) < last["content"].index(own)
    assert InViewModel(()).action(forwarded(sim)[-1]) == "step 10"


def test_on_the_messages_api_a_tool_result_keeps_its_output_last(
    sim: Simulator, tmp_path: Any
) -> None:
    settings = settings_for(
        sim.base_url,
        str(tmp_path / "ahead.db"),
        api_key=None,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        compression={"background": False, "recall": {"ahead": True}},
        upstreams={"sim": {"base_url": sim.base_url, "apis": ["chat", "messages"]}},
    )
    tools = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]
    own = "grep: REVIEW.md: the file was moved\nstep 9 done"
    with ProxyServer(settings) as proxy:
        client = anthropic.Anthropic(
            base_url=proxy.base_url.removesuffix("/v1"), api_key="sk-recall", max_retries=0
        )
        messages = anthropic_history()
        messages[-1] = {"role": "user", "content": [{"type": "text", "text": "Go on."}]}
        use = {"type": "tool_use", "id": "toolu_grep", "name": "read_file", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_grep", "content": own}
        for extra in (
            [],
            [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}],
        ):
            messages += extra
            raw = client.messages.with_raw_response.create(
                model=MODEL,
                max_tokens=512,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                extra_headers={"X-Session-Id": "ahead-tool-result"},
            )
    sent = [r for r in sim.received if r.is_messages and not r.is_summary][-1].body["messages"]
    assert "x-ctxgate-recalled-ahead" in raw.headers
    block = sent[-1]["content"][0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_grep"
    content = json.dumps(block["content"])
    assert FACT in content and content.index(FACT) < content.index("step 9 done")


def test_an_old_answer_is_found_though_newer_messages_share_the_questions_words(
    sim: Simulator, tmp_path: Any
) -> None:
    """The archive search ranks only a lineage's newest matches. A question's common words
    ("code", "only", "please") match 300 newer messages here; its rarest words, each alone,
    find the old answer."""
    answer = "The access code for the staging vault is the word bluebird."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Check my bookings."},
    ]
    for n in range(150):
        if n == 5:
            messages += [{"role": "assistant", "content": f"Booked. {answer}"}]
            messages += [{"role": "user", "content": "Thanks. Go on with the others."}]
        messages += [
            {
                "role": "assistant",
                "content": f"Step {n}: checked the code of booking {n}; its seat, its fare and "
                "its dates are as you asked. Please tell me what else to check.",
            },
            {
                "role": "user",
                "content": f"Reply with booking {n} only; the code stays as is, and the seat "
                "and the fare stay too.",
            },
        ]
    with proxy_for(sim, tmp_path, ahead=True) as proxy:
        messages[-1] = {"role": "user", "content": "Go on."}
        ask(proxy, messages)  # compresses: the answer is archived
        assert answer not in json.dumps(forwarded(sim)[-1]["messages"])
        messages += [
            {"role": "assistant", "content": "Done."},
            {
                "role": "user",
                "content": "What is the access code for the staging vault, please? Reply with "
                "the code only.",
            },
        ]
        _, headers = ask(proxy, messages)
    assert "x-ctxgate-recalled-ahead" in headers
    assert answer in forwarded(sim)[-1]["messages"][-1]["content"]
