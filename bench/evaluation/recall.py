"""The probe phase of a replay: after the last turn, the client asks about every planted fact.

The client appends one question per needle ("What is the access code for the north gate?") to
its full history (each earlier question with the final answer it got), through the same
ctxgate session, streaming every other question. The simulator's RecallModel
(tests/simulator/recall_model.py) answers from the view, or calls ctxgate's recall tool when
the fact is no longer in it; ctxgate answers that call from its archive and asks the model
again, so the client only sees the final answer. A probe is correct when that answer holds the
planted code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from bench.evaluation.artifacts import view_text
from bench.evaluation.corpus import Message, Needle
from tests.simulator import Received
from tests.simulator.recall_model import (
    RECALL_TOOL,
    fact_pattern,
    fact_question,
    recall_calls,
    tool_names,
)


@dataclass
class ProbeOutcome:
    needle: str  # "user@10%"
    code: str
    streamed: bool
    answer: str
    correct: bool
    in_view: bool  # the fact (subject and code) was in the first request forwarded for it
    code_only: bool  # that request held the code but not what it belongs to (an anchor list)
    offered: bool  # that request offered the recall tool
    recall_calls: int  # recall calls the model made (ctxgate answered them)
    client_tool_call: bool  # the client itself got a recall call: ctxgate did not serve it
    error: str | None = None


def _answer(
    client: openai.OpenAI, body: dict[str, Any], headers: dict[str, str], stream: bool
) -> tuple[str, bool]:
    """(text, recall call reached the client) of one question; streamed or not."""
    kwargs: dict[str, Any] = {
        "model": body["model"],
        "messages": [],
        "extra_body": {k: v for k, v in body.items() if k != "model"},
        "extra_headers": headers,
    }
    if not stream:
        completion = client.chat.completions.create(**kwargs)
        message = completion.choices[0].message
        return message.content or "", bool(message.tool_calls)
    parts: list[str] = []
    called = False
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            called = called or bool(choice.delta.tool_calls)
    return "".join(parts), called


def _probe_requests(new: Sequence[Received]) -> list[Received]:
    return [r for r in new if r.is_chat and not r.is_summary and r.body is not None]


def _outcome(
    needle: Needle, key: str, stream: bool, text: str, called: bool, sent: list[Received]
) -> ProbeOutcome:
    first = sent[0].body if sent else {}
    first_text = view_text((first or {}).get("messages") or [])
    in_view = fact_pattern(needle.label, needle.subject).search(first_text) is not None
    calls = max((len(recall_calls(r.messages)) for r in sent), default=0)
    return ProbeOutcome(
        needle=key,
        code=needle.code,
        streamed=stream,
        answer=text[:300],
        correct=needle.code in text,
        in_view=in_view,
        code_only=not in_view and needle.code in first_text,
        offered=RECALL_TOOL in tool_names(first or {}),
        recall_calls=calls,
        client_tool_call=called,
    )


def ask_probes(
    client: openai.OpenAI,
    sim_received: Any,
    history: list[Message],
    needles: Sequence[tuple[str, Needle]],
    base: dict[str, Any],
    headers: dict[str, str],
    before_each: Callable[[], object] | None = None,
) -> list[ProbeOutcome]:
    """Ask about every needle in turn; `sim_received()` is the simulator's request log;
    `before_each` runs before every question (the replay's wait for background compression)."""
    asked: list[Message] = []
    outcomes: list[ProbeOutcome] = []
    for n, (key, needle) in enumerate(needles):
        if before_each is not None:
            before_each()
        question = {"role": "user", "content": fact_question(needle.label, needle.subject)}
        body = {**base, "messages": [*history, *asked, question]}
        stream = n % 2 == 1
        before = len(sim_received())
        try:
            text, called = _answer(client, body, headers, stream)
        except openai.APIError as exc:
            outcomes.append(
                ProbeOutcome(
                    key, needle.code, stream, "", False, False, False, False, 0, False, str(exc)
                )
            )
            asked += [question, {"role": "assistant", "content": "(error)"}]
            continue
        sent = _probe_requests(sim_received()[before:])
        outcomes.append(_outcome(needle, key, stream, text, called, sent))
        asked += [question, {"role": "assistant", "content": text or "(no answer)"}]
    return outcomes
