"""The requests bench/overhead.py sends: the agent-history bodies and one timed call."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import orjson

# The repository keeps its own copy of the public corpus (tests/data/corpus/README.md).
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus"
MODEL = "gpt-4o"
API_KEY = "sk-bench"
DONE = b"data: [DONE]"
SIZES = {"8k": 8_192, "64k": 65_536}


def _load_corpus() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    lines = (CORPUS / "tau_bench_airline_gpt4o.jsonl").read_text().splitlines()
    conversations = [json.loads(line)["messages"] for line in lines if line.strip()]
    tools = json.loads((CORPUS / "tools" / "tau_bench_airline_tools.json").read_text())
    return conversations, tools


def _chained(conversations: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """One long support session: the first system prompt, then every conversation's turns."""
    yield conversations[0][0]
    for conversation in conversations:
        yield from (m for m in conversation if m.get("role") != "system")


def build_history(target_tokens: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The shortest chained prefix of >= target_tokens that is a valid request to send.

    A valid cut ends on a user or tool message and leaves no tool call unanswered (the next
    message is not another tool result), which is what an agent sends for its next turn.
    """
    from compression.tokens import counter_for_model

    counter = counter_for_model(MODEL)
    conversations, tools = _load_corpus()
    stream = list(_chained(conversations))
    for end in range(2, len(stream)):
        last, following = stream[end - 1], stream[end]
        if last.get("role") not in ("user", "tool") or following.get("role") == "tool":
            continue
        # The corpus is OpenAI-format JSON: plain dicts are what Message/ToolSchema describe.
        tokens = counter.count_messages(cast(Any, stream[:end]), cast(Any, tools))
        if tokens >= target_tokens:
            return stream[:end], tools, tokens
    raise SystemExit(f"the corpus holds fewer than {target_tokens} tokens")


def request_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], stream: bool
) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": tools}
    if stream:
        # Agents built on the OpenAI SDK usually ask for usage; ctxgate then relays the client's
        # bytes untouched (without it ctxgate adds the option to learn the real token count).
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def request_headers(session: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {API_KEY}",
        "content-type": "application/json",
        "x-session-id": session,  # ctxgate's session; the others ignore it
    }


class BenchError(Exception):
    """A request that did not come back as a well-formed success."""


async def timed_request(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], stream: bool
) -> float:
    """Seconds to the last byte (the full body, or `data: [DONE]` on a stream)."""
    start = time.perf_counter()
    if not stream:
        response = await client.post(url, content=body, headers=headers)
        elapsed = time.perf_counter() - start
        if response.status_code != 200 or b'"ok: ' not in response.content:
            raise BenchError(f"{response.status_code}: {response.content[:200]!r}")
        return elapsed
    done_at = None
    async with client.stream("POST", url, content=body, headers=headers) as response:
        if response.status_code != 200:
            raise BenchError(f"{response.status_code}: {(await response.aread())[:200]!r}")
        tail = b""
        async for piece in response.aiter_raw():
            tail = tail[-16:] + piece  # [DONE] may straddle two reads
            if done_at is None and DONE in tail:
                done_at = time.perf_counter()
    if done_at is None:
        raise BenchError("the stream ended without data: [DONE]")
    return done_at - start
