"""Default responder (echo + deterministic summarizer) and the chat.completion object."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .dialects import requested_max_tokens
from .models import Reply
from .tokens import count_text, tool_call_tokens, truncate_to_tokens

SUMMARY_MARKER = "Historical Task Snapshot"
# The handoff summary as assembled into a conversation ends with this line; a request whose last
# user message carries a summary *and then* a real user turn is not a summarization request.
END_OF_SUMMARY_MARKER = "END OF CONTEXT SUMMARY"

SUMMARY_HEADINGS = (
    "Historical Task Snapshot",
    "Goal",
    "Constraints & Preferences",
    "Completed Actions",
    "Active State",
    "Blocked",
    "Key Decisions",
    "Errors & Fixes",
    "Resolved Questions",
    "Relevant Files",
    "Critical Context",
)

_EXTS = (
    "py|pyi|js|mjs|ts|tsx|jsx|json|yaml|yml|toml|md|rst|txt|cfg|ini|conf|sh|go|rs|java|kt|c|h|cc"
    "|cpp|hpp|rb|php|html|css|scss|sql|lock|env|xml|csv|log|ipynb|vue|swift"
)
_PATH_RE = re.compile(rf"(?<![\w/.:-])(?:\.{{1,2}}/|~/)?(?:[\w.-]+/)*[\w-]+\.(?:{_EXTS})\b")
_ABS_PATH_RE = re.compile(r"(?<![\w/.:-])/(?:[\w.-]+/)+[\w.-]+")
_USER_LINE_RE = re.compile(r"^\s*(?:USER:|\[user\])", re.IGNORECASE)
_ASSISTANT_LINE_RE = re.compile(r"^\s*(?:ASSISTANT:|\[assistant\])", re.IGNORECASE)
_CONSTRAINT_RE = re.compile(
    r"\b(?:must|never|always|do not|don't|constraint|deadline|keep|use)\b", re.IGNORECASE
)
_ERROR_RE = re.compile(r"error", re.IGNORECASE)


def message_text(message: Any) -> str:
    """The text of a message's content (text parts joined by newlines)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def _messages(body: Any) -> list[Any]:
    msgs = body.get("messages") if isinstance(body, dict) else None
    return msgs if isinstance(msgs, list) else []


def last_message_text(body: Any, roles: tuple[str, ...]) -> str:
    for msg in reversed(_messages(body)):
        if isinstance(msg, dict) and msg.get("role") in roles:
            return message_text(msg)
    return ""


def is_summary_request(body: Any) -> bool:
    """True when the last user message carries the compressor's handoff template
    (after the last end-of-summary marker, if an assembled summary is embedded in it)."""
    text = last_message_text(body, ("user",))
    if END_OF_SUMMARY_MARKER in text:
        text = text.rsplit(END_OF_SUMMARY_MARKER, 1)[1]
    return SUMMARY_MARKER in text


def _dedupe(items: list[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
        if len(seen) >= limit:
            break
    return list(seen)


_BLOCK_RE = re.compile(r"^\[#\d+ ([A-Z][A-Z ]*)")
_BULLET_RE = re.compile(r"^\s*(?:[-*]\s+|\d+\.\s+)+")
_PREVIOUS_RE = re.compile(r"<previous_summary>(.*?)</previous_summary>", re.DOTALL)


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """Turns serialised as `[#N ROLE ...]` header lines, each with its following lines."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _BLOCK_RE.match(line.strip())
        if match:
            blocks.append((match.group(1).strip(), []))
        elif line.strip().startswith("</"):
            blocks.append(("", []))  # the end of the turns: instructions follow, not a turn
        elif blocks and line.strip():
            blocks[-1][1].append(line.strip())
    return blocks


def _previous_section(text: str, heading: str) -> list[str]:
    """Bullet lines under `## heading` of a previous summary embedded in the prompt."""
    match = _PREVIOUS_RE.search(text)
    if not match:
        return []
    out: list[str] = []
    inside = False
    for line in match.group(1).splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == heading
        elif inside and line.strip() and not line.strip().startswith("- None"):
            out.append(_BULLET_RE.sub("", line).strip())
    return out


def build_summary(body: Any) -> str:
    """A deterministic handoff summary built from the text of the summarization prompt.

    It keeps what a careful summarizer keeps — what the user asked (and the previous summary's
    record of it), errors, paths — so evaluations can see what survives compression.
    """
    text = last_message_text(body, ("user",))
    lines = [ln.rstrip() for ln in text.splitlines()]
    content_lines = [
        _BULLET_RE.sub("", ln).strip()
        for ln in lines
        if ln.strip() and not any(h in ln for h in SUMMARY_HEADINGS)
    ]
    blocks = _blocks(text)
    user_turns = [" ".join(body_lines)[:160] for role, body_lines in blocks if role == "USER"]
    user_lines = _dedupe(
        _previous_section(text, "Historical Task Snapshot")
        + user_turns
        + [ln[:80] for ln in content_lines if _USER_LINE_RE.match(ln)],
        40,
    )
    assistant_lines = _dedupe(
        _previous_section(text, "Completed Actions")
        + [" ".join(b)[:100] for role, b in blocks if role == "ASSISTANT" and b]
        + [ln[:80] for ln in content_lines if _ASSISTANT_LINE_RE.match(ln)],
        8,
    )
    errors = _dedupe([ln[:120] for ln in content_lines if _ERROR_RE.search(ln)], 8)
    constraints = _dedupe(
        _previous_section(text, "Constraints & Preferences")
        + [line for line in user_lines if _CONSTRAINT_RE.search(line)],
        6,
    )
    paths = _dedupe(
        [m.group(0) for ln in content_lines for m in _ABS_PATH_RE.finditer(ln)]
        + [m.group(0) for ln in content_lines for m in _PATH_RE.finditer(ln)],
        20,
    )

    def bullets(items: list[str], empty: str) -> list[str]:
        return [f"- {item}" for item in items] if items else [f"- {empty}"]

    sections: dict[str, list[str]] = {
        "Historical Task Snapshot": bullets(
            user_lines, "None. This session contains no user-authored turns."
        ),
        "Goal": bullets(user_lines[-1:], "Unknown."),
        "Constraints & Preferences": bullets(constraints, "None stated."),
        "Completed Actions": (
            [f"{i}. {line}" for i, line in enumerate(assistant_lines, 1)] or ["- None recorded."]
        ),
        "Active State": [f"- {len(content_lines)} lines of conversation summarized."],
        "Blocked": ["- None."],
        "Key Decisions": ["- None recorded."],
        "Errors & Fixes": bullets(errors, "None seen."),
        "Resolved Questions": ["- None."],
        "Relevant Files": bullets(paths, "None."),
        "Critical Context": [
            f"- Summary written by the provider simulator from {len(text)} characters."
        ],
    }
    out: list[str] = []
    for heading in SUMMARY_HEADINGS:
        out.append(f"## {heading}")
        out.extend(sections[heading])
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def default_reply(body: Any) -> Reply:
    """What the simulator answers when nothing is scripted."""
    if is_summary_request(body):
        text = build_summary(body)
        limit = requested_max_tokens(body)
        if limit is not None and count_text(text) > limit:
            return Reply(content=truncate_to_tokens(text, limit), finish_reason="length")
        return Reply(content=text)
    last = last_message_text(body, ("user", "tool"))
    return Reply(content="ok: " + last[:60])


def normalize_tool_calls(
    tool_calls: list[dict[str, Any]], next_id: Callable[[], str]
) -> list[dict[str, Any]]:
    """Turn ``{"name", "arguments"}`` items (or OpenAI-shaped ones) into OpenAI tool calls."""
    out = []
    for call in tool_calls:
        nested = call.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else call
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args)
        out.append(
            {
                "id": call.get("id") or next_id(),
                "type": "function",
                "function": {"name": fn.get("name", ""), "arguments": args},
            }
        )
    return out


def completion_tokens_of(reply: Reply, tool_calls: list[dict[str, Any]]) -> int:
    if reply.completion_tokens is not None:
        return reply.completion_tokens
    return count_text(reply.content or "") + tool_call_tokens(tool_calls)


def finish_reason_of(reply: Reply, tool_calls: list[dict[str, Any]]) -> str:
    if reply.finish_reason:
        return reply.finish_reason
    return "tool_calls" if tool_calls else "stop"


def chat_completion(
    *,
    completion_id: str,
    created: int,
    model: str,
    reply: Reply,
    tool_calls: list[dict[str, Any]],
    prompt_tokens: int,
    include_usage: bool = True,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    if tool_calls:
        message["tool_calls"] = tool_calls
    completion = completion_tokens_of(reply, tool_calls)
    obj: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_simulator",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason_of(reply, tool_calls),
            }
        ],
    }
    if include_usage:
        obj["usage"] = usage_object(prompt_tokens, completion)
    return obj


def usage_object(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
