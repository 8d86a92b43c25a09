"""A summary built mechanically from the middle, for when the summary model fails.

It is never the failure text: it lists what can be read off the turns themselves (the user's
asks, tools called and their one-line outcomes, files touched, errors seen, the last dropped
turns, the previous summary), under the same headings as a model-written summary.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from compression.messages.content import clip_middle, content_text
from compression.messages.toolpairs import ToolPairing, call_parts, tool_calls_of
from compression.messages.types import Message
from compression.pruning.oneliners import PATH_KEYS, first_error_line
from compression.pruning.passes import one_liner
from compression.summary.handoff import handoff_text, user_text
from compression.summary.prompts import FALLBACK_NOTE

MAX_CHARS = 8000
PREVIOUS_MAX_CHARS = 3000
_SECRET = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|"
    r"xox[abpr]-[A-Za-z0-9\-]{10,}|(?<=Bearer )[A-Za-z0-9._\-]{16,})"
)


def fallback_summary(
    messages: Sequence[Message],
    start: int,
    end: int,
    pairing: ToolPairing,
    previous: str | None,
    reason: str,
) -> str:
    region = range(start, end)
    asks = [user_text(messages[i]).strip() for i in region if messages[i].get("role") == "user"]
    asks = [ask for ask in asks if ask]
    sections = [
        ("Historical Task Snapshot", _snapshot(asks)),
        (
            "Goal",
            "Stated by the user messages carried below and the latest one after this summary.",
        ),
        (
            "Constraints & Preferences",
            "See the user messages carried verbatim below." if asks else "None recorded.",
        ),
        ("Completed Actions", _actions(messages, region, pairing)),
        ("Active State", "See the last dropped turns below and the messages after this summary."),
        ("Blocked", "None recorded."),
        ("Key Decisions", "None recorded."),
        ("Errors & Fixes", _errors(messages, region)),
        ("Resolved Questions", "None recorded."),
        ("Relevant Files", _files(messages, region)),
        ("Critical Context", "The note above: this summary is mechanical."),
        ("Last Dropped Turns", _last_turns(messages, region)),
    ]
    if previous:
        sections.append(("Previous Summary", clip_middle(previous, PREVIOUS_MAX_CHARS)))
    # The note first: a summary cut to its budget keeps its head, and the model must know that
    # what follows was not written by a model.
    text = (
        FALLBACK_NOTE.format(reason=reason)
        + "\n"
        + "\n".join(f"## {title}\n{body}" for title, body in sections)
    )
    return _SECRET.sub("[REDACTED]", clip_middle(text, MAX_CHARS, 0.8))


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _snapshot(asks: list[str]) -> str:
    if not asks:
        return "None. The compacted turns contain no user-authored messages."
    count = f"{len(asks)} user messages" if len(asks) > 1 else "1 user message"
    return f"{count} in the compacted turns (history only); the first: '{_clip(asks[0], 300)}'"


def _actions(messages: Sequence[Message], region: range, pairing: ToolPairing) -> str:
    names: Counter[str] = Counter()
    for index in region:
        for call in tool_calls_of(messages[index]):
            names[call_parts(call)[0] or "unknown"] += 1
    if not names:
        return "No tool calls."
    called = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in names.items())
    outcomes = [
        one_liner(messages, i, pairing) for i in region if messages[i].get("role") == "tool"
    ]
    shown = outcomes[-15:]
    lines = [f"Called tool(s): {called}"]
    if len(outcomes) > len(shown):
        lines.append(f"(last {len(shown)} of {len(outcomes)} results)")
    lines += [f"{number}. {line}" for number, line in enumerate(shown, 1)]
    return "\n".join(lines)


def _errors(messages: Sequence[Message], region: range) -> str:
    seen: list[str] = []
    for index in region:
        if messages[index].get("role") != "tool":
            continue
        line = first_error_line(content_text(messages[index]))
        if line and line not in seen:
            seen.append(line)
    return "\n".join(f"- {line}" for line in seen[-8:]) or "None seen."


def _files(messages: Sequence[Message], region: range) -> str:
    paths: list[str] = []
    for index in region:
        for call in tool_calls_of(messages[index]):
            for path in _call_paths(call):
                if path not in paths:
                    paths.append(path)
    return "\n".join(f"- {path}" for path in paths[-20:]) or "None recorded."


def _call_paths(call: Any) -> list[str]:
    arguments = call_parts(call)[1]
    try:
        parsed = json.loads(arguments) if arguments is not None else None
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    return [str(parsed[key]) for key in PATH_KEYS if isinstance(parsed.get(key), str)]


def _last_turns(messages: Sequence[Message], region: range) -> str:
    shown: list[str] = []
    for index in list(region)[-4:]:
        message = messages[index]
        if handoff_text(message) is not None:
            continue
        text = content_text(message)
        for call in tool_calls_of(message):
            name, arguments = call_parts(call)
            text += f" -> calls {name}({arguments or ''})"
        shown.append(f"- {message.get('role')}: {_clip(text, 300) or '(no text)'}")
    return "\n".join(shown) or "None."
