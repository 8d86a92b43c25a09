"""A scripted model that answers questions about planted facts, reading ctxgate's archive
through its recall tool when the fact is no longer in the request's view.

    sim.responder = RecallModel()                  # other requests: the default reply
    sim.responder = RecallModel(other=my_responder)

A planted fact is the sentence ``fact_sentence(label, subject, code)``
("The deploy password hint for the north gate is NEEDLE-….") and its probe is
``fact_question(label, subject)``. When the last user message is such a probe:

1. the fact in a tool result after that question (what the recall tool returned), or anywhere
   in the view -> answer with it;
2. else, when the request offers the ``ctxgate_recall`` tool, call it: with a handle when a
   handle in view points at a message that mentions the subject (a rewritten message's
   ``[archived: mN]`` suffix, or an ``- mN (role): …`` line of an earlier search result),
   else with a query made of the probe's words, then of the subject's words alone; at most
   `max_calls` calls;
3. else answer that the fact is not in the conversation.

Chat-shaped requests only (``tool_calls`` / ``tool`` messages); a streamed request gets the same
reply as SSE, as every simulator Reply does.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .models import Reply
from .replies import message_text

RECALL_TOOL = "ctxgate_recall"
QUESTION = re.compile(r"^What is the (?P<label>[^?\n]+?) for (?P<subject>[^?\n]+?)\?")
SUFFIX_HANDLE = re.compile(r"\[archived: (m\d+)\]")
RESULT_LINE = re.compile(r"^(?:- )?(m\d+) \(([^)\n]*)\)", re.MULTILINE)

Message = dict[str, Any]
Other = Callable[[dict[str, Any]], Any]


def fact_sentence(label: str, subject: str, code: str) -> str:
    return f"The {label} for {subject} is {code}."


def fact_question(label: str, subject: str) -> str:
    return f"What is the {label} for {subject}? Reply with the {label} only."


def fact_pattern(label: str, subject: str) -> re.Pattern[str]:
    """The fact with its whole code: not one a search snippet cut short ("NEEDLE-76…")."""
    return re.compile(rf"The {re.escape(label)} for {re.escape(subject)} is ([\w-]+)(?![\w-]|…)")


@dataclass(frozen=True)
class Probe:
    label: str
    subject: str

    @property
    def pattern(self) -> re.Pattern[str]:
        return fact_pattern(self.label, self.subject)

    @property
    def query(self) -> str:
        return f"{self.label} for {self.subject}"

    @property
    def queries(self) -> tuple[str, ...]:
        """What to search for: the question's words, then only the subject's own words."""
        words = [w for w in self.subject.split() if w.lower() not in ("the", "a", "an")]
        return self.query, " ".join(words)

    def mentioned_in(self, text: str) -> bool:
        return self.subject.lower() in text.lower()


def probe_of(text: str) -> Probe | None:
    match = QUESTION.match(text.strip())
    return Probe(match["label"], match["subject"]) if match else None


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _last_user(messages: list[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def recall_calls(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The arguments of every recall call among `messages`."""
    calls = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") != RECALL_TOOL:
                continue
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls.append(arguments if isinstance(arguments, dict) else {})
    return calls


def _text(messages: Iterable[Message]) -> str:
    parts = []
    for message in messages:
        parts.append(message_text(message))
        for call in message.get("tool_calls") or []:
            parts.append(str((call.get("function") or {}).get("arguments") or ""))
    return "\n".join(parts)


@dataclass
class RecallModel:
    """other      answers every request that is not a fact probe (None: the default reply)
    max_calls  recall calls per question before the model gives up"""

    other: Other | None = None
    max_calls: int = 4

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        asked = _last_user(messages)
        probe = probe_of(message_text(messages[asked])) if asked is not None else None
        if probe is None or asked is None:
            return self.other(body) if self.other is not None else None
        # The question's own message is part of the view the model reads: a proxy may have
        # appended text to it (ctxgate's recall before asking does).
        return self.answer(probe, messages[: asked + 1], messages[asked + 1 :], body)

    def answer(
        self, probe: Probe, before: list[Message], after: list[Message], body: dict[str, Any]
    ) -> Reply:
        # The longest code seen: a summary may carry the sentence cut short ("… is N").
        codes = probe.pattern.findall(_text(after)) or probe.pattern.findall(_text(before))
        if codes:
            return Reply(content=fact_sentence(probe.label, probe.subject, max(codes, key=len)))
        calls = recall_calls(after)
        if RECALL_TOOL not in tool_names(body) or len(calls) >= self.max_calls:
            return Reply(content=f"The {probe.query} is not in this conversation.")
        read = {str(c.get("handle")) for c in calls if c.get("handle")}
        handle = _handle_in(after, probe, read) or _handle_in(before, probe, read)
        if handle is not None:
            return _call({"handle": handle})
        searched = {str(c.get("query")) for c in calls if c.get("query")}
        query = next((q for q in probe.queries if q not in searched), None)
        if query is None:
            return Reply(content=f"The {probe.query} is not in this conversation.")
        return _call({"query": query})


def _handle_in(messages: list[Message], probe: Probe, read: set[str]) -> str | None:
    """A handle not read yet: an `- mN (role): …` line of the newest search result that
    mentions the probe's subject, else that result's best hit (its snippet may show another
    part of the message); or a rewritten message's suffix when the message mentions it."""
    newest_result = True
    for message in reversed(messages):
        text = message_text(message)
        if message.get("role") == "tool":
            hits = [
                (hit.group(1), line)
                for line in text.splitlines()
                if (hit := RESULT_LINE.match(line)) and hit.group(1) not in read
            ]
            named = [h for h, line in hits if probe.mentioned_in(line)]
            if named or (hits and newest_result):
                return (named or [hits[0][0]])[0]
            newest_result = False
            continue
        suffix = SUFFIX_HANDLE.search(text)
        if suffix and suffix.group(1) not in read and probe.mentioned_in(text):
            return suffix.group(1)
    return None


def _call(arguments: dict[str, str]) -> Reply:
    call = {
        "id": f"call_recall_{secrets.token_hex(6)}",
        "name": RECALL_TOOL,
        "arguments": arguments,
    }
    return Reply(tool_calls=[call])
