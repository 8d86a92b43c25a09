"""A scripted agent model: for ``turns`` rounds it calls the request's shell tool with a harmless
command whose output is a few hundred tokens, then answers with text. Set it as the responder:
``sim.responder = ScriptedAgent(turns=20)``.

It works out which round it is in from the tool-call ids it issued, which carry the round
number, so a history that a proxy shortened (the latest call and its result are always kept)
still tells where the agent is; and a retried request gets the same answer. Both the Messages
shape (``tool_use``/``tool_result``) and the chat shape (``tool_calls``/``tool``) are read.
Claude Code's own compaction request (sent after a "prompt is too long") is answered with the
``<summary>`` it asks for, naming the last round's id so that the compacted history still tells.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .models import Reply
from .replies import is_summary_request

SHELL_TOOLS = ("Bash", "bash", "shell", "terminal", "run_command", "execute_command")
_ROUND_RE = re.compile(r"toolu_01SimR(\d{4})")
CLAUDE_CODE_COMPACTION = "Your task is to create a detailed summary of the conversation so far"


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


def rounds_done(body: dict[str, Any]) -> int:
    """One more than the highest round number among the call ids that the user side of the
    history mentions: tool results, or a summary that names them (0 when none is left)."""
    answered = -1
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") not in ("user", "tool"):
            continue
        for match in _ROUND_RE.finditer(json.dumps(message, ensure_ascii=False)):
            answered = max(answered, int(match.group(1)))
    return answered + 1


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            blocks = content if isinstance(content, list) else []
            return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    return ""


def is_claude_code_compaction(body: dict[str, Any]) -> bool:
    """Claude Code asking the model to summarize the conversation (its automatic compaction)."""
    return CLAUDE_CODE_COMPACTION in _last_user_text(body)


def compaction_summary(done: int) -> str:
    last = f"toolu_01SimR{done - 1:04d}" if done else "none"
    return (
        f"<analysis>The scripted agent has finished {done} rounds.</analysis>\n"
        "<summary>\n1. Primary Request and Intent:\n   Run the listing commands one after "
        f"another.\n2. Progress:\n   {done} rounds done; the last call was {last}.\n"
        "3. Pending Tasks:\n   Run the remaining listing commands.\n</summary>"
    )


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
        if is_claude_code_compaction(body):
            return Reply(content=compaction_summary(rounds_done(body)))
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
