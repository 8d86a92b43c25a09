"""A scripted agent model: set ``sim.responder = ShellAgent(turns=K)`` and for K turns it
answers with a call to the request's shell tool (running a harmless command whose output is a
few hundred tokens), optionally after a reasoning item, then with a final assistant message.
It serves Responses requests (function_call, or custom_tool_call when the only tool is a custom
one) and chat requests (tool_calls) alike.

It finds its place in a conversation from its own call ids (``call_step<N>_...``) in the
history, so a history that a proxy compressed (middle dropped, a summary inserted) still
continues at the right step; when none survive (or an agent compacted its history itself), it
continues after the highest step it issued for that session (``prompt_cache_key``, else the
first user message). Requests without a shell tool, and
summary or compaction requests (a proxy's summary call, Codex's "CONTEXT CHECKPOINT COMPACTION"
turn), get ``None``: the simulator's default reply."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from .models import Reply
from .replies import is_summary_request, last_message_text
from .responses_items import chat_view, input_items

STEP_ID = re.compile(r"^call_step(\d+)_")
DEFAULT_COMMAND = 'echo "step {n}"; seq -s " " {n}000 {n}120'
# Codex's shell tools (exec_command takes {"cmd"}, shell_command {"command": str}, the older
# shell {"command": [argv]}), then generic names other agents use.
COMPACTION_PROMPT = "CONTEXT CHECKPOINT COMPACTION"  # Codex's own compaction turn
SHELL_TOOLS = ("exec_command", "shell_command", "shell", "bash", "run_shell_command", "terminal")


@dataclass
class ShellAgent:
    turns: int = 20
    command: str = DEFAULT_COMMAND  # formatted with n (the step, from 1)
    reasoning: bool = True
    final: str = "Done: ran {turns} steps; every command succeeded."
    _issued: dict[str, int] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        tool = shell_tool(body.get("tools"))
        if tool is None or _asks_for_a_summary(body):
            return None
        session = _session_key(body)
        done = self._step_done(body, session)
        step = done + 1
        if step > self.turns:
            return Reply(content=self.final.format(turns=self.turns))
        with self._lock:
            self._issued[session] = max(self._issued.get(session, 0), step)
        call_id = f"call_step{step:03d}_{secrets.token_hex(3)}"
        call = _call(tool, self.command.format(n=step), call_id)
        thought = f"Step {step} of {self.turns}: run the next command and read its output."
        return Reply(tool_calls=[call], reasoning_content=thought if self.reasoning else None)

    def _step_done(self, body: dict[str, Any], session: str) -> int:
        """The last step the history shows as answered (0 for a new conversation)."""
        steps = [
            int(m.group(1)) for call_id in _history_calls(body) if (m := STEP_ID.match(call_id))
        ]
        if steps:
            return max(steps)
        with self._lock:  # none of our ids: a new session, or one compressed (or compacted) away
            return self._issued.get(session, 0)

    def issued(self) -> dict[str, int]:
        """The highest step issued per session."""
        with self._lock:
            return dict(self._issued)


def shell_tool(tools: Any) -> dict[str, Any] | None:
    """The tool to call: a shell function among ``tools`` (chat or Responses shape), else the
    only tool when it is a custom (free-form input) tool."""
    if not isinstance(tools, list):
        return None
    named: dict[str, dict[str, Any]] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = _mapping(tool.get("function")) or tool
        if tool.get("type") in ("function", "custom") and isinstance(fn.get("name"), str):
            named[fn["name"]] = {**fn, "type": tool["type"]}
    for name in SHELL_TOOLS:
        if name in named:
            return named[name]
    if len(tools) == 1 and len(named) == 1:
        only = next(iter(named.values()))
        return only if only["type"] == "custom" else None
    return None


def _call(tool: dict[str, Any], command: str, call_id: str) -> dict[str, Any]:
    name = tool["name"]
    if tool["type"] == "custom":
        return {"id": call_id, "type": "custom", "name": name, "input": command}
    props = _mapping(_mapping(tool.get("parameters")).get("properties"))
    if "cmd" in props:
        args: dict[str, Any] = {"cmd": command}
    elif _mapping(props.get("command")).get("type") == "array":
        args = {"command": ["bash", "-lc", command]}
    else:
        args = {"command": command}
    return {"id": call_id, "name": name, "arguments": json.dumps(args)}


def _history_calls(body: dict[str, Any]) -> list[str]:
    """Call ids in the history (Responses or chat body)."""
    ids: list[str] = []
    for item in _sequence(body.get("input")):
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_call"):
            if isinstance(item.get("call_id"), str):
                ids.append(item["call_id"])
    for msg in _sequence(body.get("messages")):
        for call in _sequence(_mapping(msg).get("tool_calls")):
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                ids.append(call["id"])
    return ids


def _session_key(body: dict[str, Any]) -> str:
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return key
    history = [*_sequence(body.get("input")), *_sequence(body.get("messages"))]
    first: dict[str, Any] = next((m for m in history if _is_user(m)), {})
    return hashlib.sha256(json.dumps(first.get("content"), default=str).encode()).hexdigest()


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user"


def _asks_for_a_summary(body: dict[str, Any]) -> bool:
    """A proxy's summary call, or an agent's own compaction turn, even with tools offered."""
    view = body if "messages" in body else chat_view(body, input_items(body))
    last = last_message_text(view, ("user",))
    return is_summary_request(view) or COMPACTION_PROMPT in last


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sequence(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
