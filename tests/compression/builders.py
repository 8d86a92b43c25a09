"""Small builders for chat messages, transcripts and engine contexts used across the tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compression.engine import CompressionContext, Summarizer
from compression.messages.types import Message, ToolCall
from compression.state import EngineState
from tests.compression.counters import CharCounter

# A copy of ../shared/corpus is kept in the repository so that CI has it on a clean machine.
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def system(text: str = "You are a careful coding agent.") -> Message:
    return {"role": "system", "content": text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def reply(text: str) -> Message:
    return {"role": "assistant", "content": text}


def call(call_id: str, name: str = "bash", **arguments: Any) -> ToolCall:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def calls(*tool_calls: ToolCall, text: str | None = None) -> Message:
    return {"role": "assistant", "content": text, "tool_calls": list(tool_calls)}


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def tool_round(call_id: str, output: str, name: str = "bash", **arguments: Any) -> list[Message]:
    return [calls(call(call_id, name, **arguments)), result(call_id, output)]


def agent_session(rounds: int, output_chars: int = 2000, asks: int = 3) -> list[Message]:
    """A system prompt, then `asks` user requests each followed by tool rounds and a reply."""
    messages: list[Message] = [system()]
    for ask in range(asks):
        messages.append(user(f"Request {ask}: fix bug #{ask} and never touch main.py"))
        for step in range(rounds):
            output = f"line {step} of request {ask}\n" * (output_chars // 24)
            messages += tool_round(f"c{ask}_{step}", output, command=f"pytest -k t{step}")
        messages.append(reply(f"Done with request {ask}."))
    messages.append(user("Now run the whole suite and report."))
    return messages


def context(
    *,
    summarize: Summarizer | None = None,
    context_length: int = 8_000,
    max_output_tokens: int | None = 1_000,
    state: EngineState | None = None,
    counter: CharCounter | None = None,
    **extra: Any,
) -> CompressionContext:
    return CompressionContext(
        model="test-model",
        context_length=context_length,
        max_output_tokens=max_output_tokens,
        counter=counter or CharCounter(),
        summarize=summarize,
        state=state or EngineState(),
        **extra,
    )


def corpus_conversations() -> Iterator[tuple[str, list[Message]]]:
    """Every corpus conversation, cut at its last user/tool message (a request's shape)."""
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            messages: list[Message] = row["messages"]
            last = max(i for i, m in enumerate(messages) if m["role"] in ("user", "tool"))
            yield row["id"], messages[: last + 1]


def text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content)
    return ""
