"""Claude Code's project logs (`~/.claude/projects/PROJECT/SESSION.jsonl`) as Messages requests.

Each line is one event; `user` and `assistant` lines carry a Messages API `message`. An answer
streamed as several content blocks is logged one line per block, all with the same message
id: they are joined back into one message. Lines of sub-agents (`isSidechain`), and the
messages Claude Code writes itself without a model call (model `<synthetic>`), are not part
of the main conversation's requests. The log keeps neither the system prompt nor the tool
schemas nor the cache breakpoint, so the replayed requests are the conversation with Claude
Code's breakpoint on the newest message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.edge.replay.readers.claude_requests import logged_requests
from proxy.edge.replay.readers.jsonl import json_lines
from proxy.edge.replay.readers.recording import Body, Recording, RecordingError, growing

SOURCE = "claude-code"
MAX_TOKENS = 32_000  # Claude Code's default output reservation


def looks_like(line: dict[str, Any]) -> bool:
    return line.get("type") in ("user", "assistant", "summary") and (
        "sessionId" in line or "leafUuid" in line or "parentUuid" in line
    )


def read(path: Path) -> list[Recording]:
    lines = json_lines(path)
    messages: list[Body] = []
    model = ""
    last_id: str | None = None
    for line in lines:
        message = line.get("message")
        if line.get("type") not in ("user", "assistant") or line.get("isSidechain"):
            continue
        if not isinstance(message, dict) or message.get("model") == "<synthetic>":
            continue
        role = message.get("role")
        blocks = _blocks(message.get("content"))
        if role not in ("user", "assistant") or not blocks:
            continue
        if role == "assistant":
            model = model or str(message.get("model") or "")
        same_answer = role == "assistant" and message.get("id") and message.get("id") == last_id
        if messages and messages[-1]["role"] == role and (same_answer or role == "user"):
            messages[-1]["content"].extend(blocks)  # one message split over lines
        else:
            messages.append({"role": role, "content": blocks})
        last_id = message.get("id") if role == "assistant" else None
    if not model:
        raise RecordingError(f"{path}: no answer of a model in this Claude Code log")
    answers = [m for m in messages if m["role"] == "assistant"]
    logged = logged_requests(lines, answers)
    if logged:
        bodies = tuple(logged)
    else:
        base: Body = {"model": model, "max_tokens": MAX_TOKENS, "stream": False}
        grown = growing(base, "messages", messages, lambda m: m["role"] == "assistant")
        bodies = tuple(_with_breakpoint(body) for body in grown)
    name = next((str(x["sessionId"]) for x in lines if x.get("sessionId")), path.stem)
    return [Recording(name, SOURCE, "messages", model, bodies)] if bodies else []


def _with_breakpoint(body: Body) -> Body:
    """The body with the cache breakpoint Claude Code sets on its newest message (the log
    does not keep it): the provider reads the prefix it shares with the previous request."""
    *earlier, last = body["messages"]
    *blocks, end = last["content"]
    marked = {**end, "cache_control": {"type": "ephemeral"}}
    return {**body, "messages": [*earlier, {**last, "content": [*blocks, marked]}]}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Content blocks, empty text left out (the API refuses an empty text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        return []
    return [
        dict(block)
        for block in content
        if isinstance(block, dict)
        and not (block.get("type") == "text" and not str(block.get("text", "")).strip())
    ]
