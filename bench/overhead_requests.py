"""The requests bench/overhead.py sends: the agent-history bodies and one timed call."""

from __future__ import annotations

import bisect
import functools
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


@functools.cache  # one history per size, shared by every cell that sends it
def build_history(target_tokens: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The shortest chained prefix of >= target_tokens that is a valid request to send.

    A valid cut ends on a user or tool message and leaves no tool call unanswered (the next
    message is not another tool result), which is what an agent sends for its next turn.
    """
    from compression import counter_for_model

    counter = counter_for_model(MODEL)
    conversations, tools = _load_corpus()
    stream = list(_chained(conversations))
    for end in valid_cuts(stream):
        # The corpus is OpenAI-format JSON: plain dicts are what Message/ToolSchema describe.
        tokens = counter.count_messages(cast(Any, stream[:end]), cast(Any, tools))
        if tokens >= target_tokens:
            return stream[:end], tools, tokens
    raise SystemExit(f"the corpus holds fewer than {target_tokens} tokens")


def valid_cuts(messages: list[dict[str, Any]]) -> list[int]:
    """Every `end` at which `messages[:end]` is a request an agent sends for its next turn."""
    return [
        end
        for end in range(2, len(messages) + 1)
        if messages[end - 1].get("role") in ("user", "tool")
        and (end == len(messages) or messages[end].get("role") != "tool")
    ]


BODIES = ("same", "fresh", "novel", "growing")


class Bodies:
    """What one cell sends, and under which session id.

    - `same`: the identical body, one session per client (what a cache could answer).
    - `fresh`: a body no session has seen: a new tag in its first user message, a new session
      id. What every first request of a session, and a history edited at its start, cost.
      All its other messages are those of the body before it, which ctxgate parsed (a new
      session of one agent, or one client's rewritten early message).
    - `novel`: a body sharing no opening with any before it, in any cell: a new tag at the
      start of its system prompt, a new session id. ctxgate parses and checks all of it.
    - `growing`: each client's session gains one turn per round, as an agent's does. Its
      history runs from the valid cut at three quarters of the size up to the whole history,
      tagged in its first user message with the client and lap (so that no two clients send
      the same bytes); when the turns run out, the client starts a new session from the
      smallest again.
    """

    def __init__(
        self,
        kind: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tokens: int,
        stream: bool,
    ) -> None:
        self.kind = kind
        self.stream = stream
        self.sent = 0
        self.rounds = 0
        self._whole = request_body(messages, tools, stream)
        self._at = self._whole.index(FIRST_USER) + len(FIRST_USER)  # the same in every cut
        self._opening = self._whole.index(FIRST_CONTENT) + len(FIRST_CONTENT)
        self._grown: list[bytes] = []
        if kind == "growing":
            cuts = valid_cuts(messages)
            start = _first_cut_at(messages, tools, cuts, tokens * 3 // 4)
            self._grown = [request_body(messages[:end], tools, stream) for end in cuts[start:]]

    def next_round(self) -> int:
        """The number of the round about to start; it goes on across a cell's passes."""
        self.rounds += 1
        return self.rounds - 1

    def get(self, step: int, client: int, session: str) -> tuple[bytes, str]:
        """The body and session id for round `step`'s `client` (every target gets the same
        history in a round; `fresh` gives each request its own tag all the same)."""
        self.sent += 1
        if self.kind in ("fresh", "novel"):
            # The streamed cells' tags differ from the plain ones': the plain cell's bodies,
            # sent first, would otherwise share their opening with the streamed cell's.
            tag = f"[{'streamed ' if self.stream else ''}request {self.sent:09d}] ".encode()
            at = self._at if self.kind == "fresh" else self._opening
            body = self._whole[:at] + tag + self._whole[at:]
            return body, f"{session}-{self.kind}-{self.sent}"
        if self.kind == "growing":
            lap, turn = divmod(step, len(self._grown))
            tag = f"[client {client} lap {lap}] ".encode()
            return self._tagged(self._grown[turn], tag), f"{session}-{client}-lap{lap}"
        return self._whole, f"{session}-{client}"

    def _tagged(self, body: bytes, tag: bytes) -> bytes:
        return body[: self._at] + tag + body[self._at :]

    @property
    def turns(self) -> int:
        """Requests one growing session makes before the client starts another."""
        return len(self._grown)


FIRST_USER = b'"role":"user","content":"'
FIRST_CONTENT = b'"content":"'  # the system prompt's


def _first_cut_at(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], cuts: list[int], tokens: int
) -> int:
    """The index in `cuts` of the first cut holding at least `tokens`."""
    from compression import counter_for_model

    counter = counter_for_model(MODEL)

    def size(end: int) -> int:
        return counter.count_messages(cast(Any, messages[:end]), cast(Any, tools))

    return bisect.bisect_left(cuts, tokens, key=size)


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
