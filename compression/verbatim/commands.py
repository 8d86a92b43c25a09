"""The commands an agent ran in the compacted turns, kept verbatim in the handoff (pure).

A summary says "ran the tests"; the next step needs the exact command line (the flags, the
test id, the file it named) to run it again or to build on it. The handoff's anchors end with
them, newest first, one per line (a command is what it did: it needs no gloss):

    - ran: pytest tests/test_app.py::test_total -x
    - ran: decompile --function_name FUN_004015c6 rock

Commands are read from the assistant's tool calls (`command` / `cmd` arguments, the shell
tools of Claude Code, Codex, OpenCode and SWE-agent's function calling) and from the fenced
blocks of text-action agents (SWE-agent, mini-swe-agent), first line each. Multi-line and
overlong ones are left to the summary and the archive.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from compression.messages.content import content_text
from compression.messages.toolpairs import call_parts, tool_calls_of
from compression.messages.types import Message

COMMAND_PREFIX = "- ran: "
MAX_COMMAND_CHARS = 160
COMMAND_SHARE = 0.65  # of the anchors' room, most the commands may take
_KEYS = ("command", "cmd")
_FENCED = re.compile(r"```[\w-]*\n(.+?)\n```", re.S)


def commands_of(message: Message) -> list[str]:
    """The commands an assistant message ran, in order (none for other roles)."""
    if message.get("role") != "assistant":
        return []
    found: list[str] = []
    for call in tool_calls_of(message):
        parsed = _parsed(call_parts(call)[1])
        if isinstance(parsed, dict):
            found += [parsed[k] for k in _KEYS if isinstance(parsed.get(k), str)]
    for block in _FENCED.findall(content_text(message)):
        stripped = block.strip()
        if stripped:
            found.append(stripped.splitlines()[0])
    return [c.strip() for c in found if _keepable(c.strip())]


def _parsed(arguments: str | None) -> Any:
    try:
        return json.loads(arguments) if arguments else None
    except ValueError:
        return None


def _keepable(command: str) -> bool:
    return bool(command) and "\n" not in command and len(command) <= MAX_COMMAND_CHARS


def select_commands(
    commands: Iterable[str],
    room: int,
    count: Callable[[str], int],
    present: Callable[[str], bool],
) -> tuple[tuple[str, ...], int]:
    """Distinct commands in order (newest first) within `room` tokens, skipping those the view
    holds and those too long for what is left; returns them and the tokens they take."""
    chosen: list[str] = []
    used = 0
    for command in dict.fromkeys(commands):
        if present(command):
            continue
        cost = count(COMMAND_PREFIX + command + "\n")
        if used + cost > room:
            continue  # an older, shorter command may still fit
        chosen.append(command)
        used += cost
    return tuple(chosen), used


def render_commands(commands: Sequence[str]) -> list[str]:
    return [COMMAND_PREFIX + command for command in commands]


def parse_command(line: str) -> str | None:
    """The command of one rendered line, or None for any other line."""
    return line[len(COMMAND_PREFIX) :] if line.startswith(COMMAND_PREFIX) else None
