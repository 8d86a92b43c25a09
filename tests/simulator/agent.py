"""A scripted agent model: for ``turns`` rounds it calls the request's shell tool with a harmless
command whose output is a few hundred tokens, then answers with text. Set it as the responder:
``sim.responder = ScriptedAgent(turns=20)``.

It works out which round it is in from the tool-call ids it issued, which carry the round
number, so a history that a proxy shortened (the latest call and its result are always kept)
still tells where the agent is; and a retried request gets the same answer. Both the Messages
shape (``tool_use``/``tool_result``) and the chat shape (``tool_calls``/``tool``) are read.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from .models import Reply
from .replies import is_summary_request

SHELL_TOOLS = ("Bash", "bash", "shell", "terminal", "run_command", "execute_command")
_ROUND_RE = re.compile(r"toolu_01SimR(\d{4})")


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


def shell_tool(body: dict[str, Any]) -> str | None:
    names = _tool_names(body)
    return next((n for n in SHELL_TOOLS if n in names), None)


def _ids_in(message: dict[str, Any]) -> list[str]:
    ids = [str(message.get("tool_call_id", ""))]
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            ids.append(str(call.get("id", "")))
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            ids.append(str(block.get("id") or block.get("tool_use_id") or ""))
    return ids


def rounds_done(body: dict[str, Any]) -> int:
    """One more than the highest round number among the ids of answered calls in the history
    (0 when none is left)."""
    answered = -1
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") not in ("user", "tool"):
            continue
        for call_id in _ids_in(message):
            match = _ROUND_RE.match(call_id)
            if match:
                answered = max(answered, int(match.group(1)))
    return answered + 1


def command_for(round_: int, lines: int) -> tuple[str, str]:
    """A harmless shell command and its description; its output is ``lines`` short lines."""
    start = round_ * 1000 + 1
    command = f"seq -f 'line %g of the listing' {start} {start + lines - 1}"
    return command, f"Print listing lines {start} to {start + lines - 1}"


@dataclass
class ScriptedAgent:
    """turns         tool rounds before the final answer
    thinking      give each answer a reasoning text (sent as a thinking block when the request
                  enables thinking; as ``reasoning_content`` on chat)
    output_lines  lines printed by each command (about 6 tokens a line)
    """

    turns: int = 20
    thinking: bool = True
    output_lines: int = 50

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            return None  # the simulator's own summarizer answers
        tool = shell_tool(body)
        if tool is None:
            return None
        done = rounds_done(body)
        if done >= self.turns:
            return Reply(
                content=f"Done: ran {done} commands and read their output.",
                reasoning_content=self._thought(f"All {done} rounds are done.") or None,
            )
        command, description = command_for(done, self.output_lines)
        call_id = f"toolu_01SimR{done:04d}{secrets.token_hex(6)}"
        arguments = {"command": command, "description": description}
        return Reply(
            tool_calls=[{"id": call_id, "name": tool, "arguments": arguments}],
            reasoning_content=self._thought(f"Round {done + 1}: I will run `{command}`.") or None,
        )

    def _thought(self, text: str) -> str:
        return text if self.thinking else ""
