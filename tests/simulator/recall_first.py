"""A responder wrapper that makes a scripted agent read ctxgate's archive now and then:
``sim.responder = RecallFirst(ShellAgent(...))``.

Whenever a request offers ctxgate's recall tool (chat, Responses or Messages shape) and the
conversation does not end with that tool's answer, it first calls the tool with the first
handle the request names (``[archived: m12]`` or the summary's ``[Archived originals: …]``
line); the next request, ending with the answer, goes to the wrapped agent, so the agent's own
script goes on as before. What the tool answered is kept in ``answers``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from .models import Reply

TOOL = "ctxgate_recall"
_HANDLE = re.compile(r"\[archived: (m\d+)\]|\[Archived originals: (m\d+)")


@dataclass
class RecallFirst:
    agent: Any  # a responder: body -> Reply | None
    every: int = 2  # recall on every n-th request that offers the tool
    answers: list[str] = field(default_factory=list)
    offered: int = 0  # requests that offered the tool
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, body: dict[str, Any]) -> Any:
        if not offers_recall(body):
            return self.agent(body)
        answer = recall_answer(body)
        if answer is not None:
            with self._lock:
                self.answers.append(answer)
            return self.agent(body)
        with self._lock:
            self.offered += 1
            due = self.offered % self.every == 1 or self.every == 1
        text = json.dumps(body)
        found = _HANDLE.search(text)
        if not due or found is None:
            return self.agent(body)
        handle = found.group(1) or found.group(2)
        return Reply(tool_calls=[{"name": TOOL, "arguments": {"handle": handle}}])


def offers_recall(body: dict[str, Any]) -> bool:
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if name == TOOL:
                return True
    return False


def recall_answer(body: dict[str, Any]) -> str | None:
    """The recall tool's answer when the conversation ends with it (any of the three shapes)."""
    calls: set[str] = set()
    last: Any = None
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:  # chat
            if (call.get("function") or {}).get("name") == TOOL:
                calls.add(str(call.get("id")))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:  # Messages
            if isinstance(block, dict) and block.get("type") == "tool_use":
                if block.get("name") == TOOL:
                    calls.add(str(block.get("id")))
        last = message
    for item in body.get("input") or [] if isinstance(body.get("input"), list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            if item.get("name") == TOOL:
                calls.add(str(item.get("call_id")))
        last = item
    return _answer_in(last, calls)


def _answer_in(last: Any, calls: set[str]) -> str | None:
    if not isinstance(last, dict) or not calls:
        return None
    if last.get("role") == "tool" and str(last.get("tool_call_id")) in calls:
        return str(last.get("content"))
    if last.get("type") == "function_call_output" and str(last.get("call_id")) in calls:
        return str(last.get("output"))
    content = last.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if str(block.get("tool_use_id")) in calls:
                inner = block.get("content")
                return inner if isinstance(inner, str) else json.dumps(inner)
    return None
