"""Anthropic's server-side compaction through ctxgate, for real: the `anthropic` SDK -> ctxgate
-> the simulator, which compacts like the API (a `compaction` block opening its answer once
the prompt reaches the `context_management` trigger) and reads nothing before the newest
compaction block.

Checked: compaction blocks and `context_management` reach the provider byte for byte; ctxgate
counts only what the provider reads, so a history far past the window whose live part fits is
forwarded untouched; a compression of the live part keeps the compaction turn, and everything
before it, as the client sent them; on-demand compaction is left to the provider."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest

from proxy.edge.app import create_app
from tests.proxy.doors.messages.answers import accumulate
from tests.servers import Recorder, ThreadedServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.agent import ScriptedAgent
from tests.simulator.anthropic_compaction import compaction_cut

MODEL = "claude-small"
WINDOW = 16_384
KEY = "sk-ant-client"
BETA = "compact-2026-01-12"
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
SYSTEM = "You are a coding agent."


def management(trigger: int) -> dict[str, Any]:
    edit = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger}}
    return {"edits": [edit]}


@pytest.fixture
def sim() -> Iterator[Simulator]:
    spec = ModelSpec(window=WINDOW, dialect="anthropic")
    with Simulator(models={MODEL: spec}, default=spec) as simulator:
        yield simulator


@pytest.fixture
def proxy(sim: Simulator, db_path: str) -> Iterator[tuple[ThreadedServer, Recorder]]:
    settings = settings_for(
        sim.url + "/v1",
        db_path,
        api_key=None,
        models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
        upstreams={"sim": {"base_url": sim.url + "/v1", "apis": ["messages"]}},
    )
    recorder = Recorder(create_app(settings), "/v1/messages")
    with ThreadedServer(recorder, name="ctxgate", lifespan="on") as server:
        yield server, recorder


def client_of(server: ThreadedServer) -> anthropic.Anthropic:
    root = f"http://127.0.0.1:{server.port}"
    return anthropic.Anthropic(base_url=root, api_key=KEY, max_retries=0, timeout=60)


def forwarded(sim: Simulator) -> list[Any]:
    return [r for r in sim.received if r.path.endswith("/messages") and not r.is_summary]


def output(call: dict[str, Any], lines: int = 40) -> str:
    return f"$ {call['input']['command']}\n" + "\n".join(
        f"line {n}: handler_{n}(request) returned {n * 7}" for n in range(lines)
    )


class Agent:
    """A client that keeps its whole history, compaction blocks included, and sends it all
    every turn (the API ignores what precedes the newest compaction block)."""

    def __init__(self, server: ThreadedServer, *, stream: bool, trigger: int) -> None:
        self.client = client_of(server)
        self.stream = stream
        self.trigger = trigger
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
        self.compressed: list[str] = []

    def turn(self) -> bool:
        body = {
            "model": MODEL,
            "max_tokens": 4096,
            "system": SYSTEM,
            "messages": self.messages,
            "tools": TOOLS,
            "stream": self.stream,
            "extra_body": {"context_management": management(self.trigger)},
            "extra_headers": {"anthropic-beta": BETA},
        }
        create = self.client.messages.with_raw_response.create
        if self.stream:
            with self.client.messages.with_streaming_response.create(**body) as raw:  # type: ignore[call-overload]
                self.compressed.append(raw.headers["x-ctxgate-compressed"])
                message = accumulate(raw.iter_lines())
        else:
            answer = create(**body)  # type: ignore[call-overload]
            self.compressed.append(answer.headers["x-ctxgate-compressed"])
            message = json.loads(answer.http_response.content)
        content = message["content"]
        self.messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return False
        results = [
            {"type": "tool_result", "tool_use_id": c["id"], "content": output(c, 150)}
            for c in calls
        ]
        self.messages.append({"role": "user", "content": results})
        return True


def compaction_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "compaction"
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_provider_compaction_crosses_ctxgate_untouched(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder], stream: bool
) -> None:
    """The provider compacts twice or more; the client keeps sending its whole history, which
    grows far past the window, while what the provider reads (from the newest compaction block
    on) stays within it: ctxgate forwards every request as it came."""
    server, recorder = proxy
    sim.responder = ScriptedAgent(turns=24, thinking=False, output_lines=40)
    agent = Agent(server, stream=stream, trigger=5_000)
    while agent.turn():
        pass
    sent = forwarded(sim)
    assert [r.problems for r in sent] == [[] for _ in sent]
    assert all(r.outcome == "reply" for r in sent)
    assert len(compaction_blocks(agent.messages)) >= 2
    # What the client sent is what the provider got, byte for byte: compaction blocks and
    # context_management included; ctxgate never compressed.
    assert len(recorder.bodies) == len(sent) == 25
    assert [r.raw for r in sent] == recorder.bodies
    assert set(agent.compressed) == {"false"}
    assert not [r for r in sim.received if r.is_summary]
    whole = [orjson.loads(body) for body in recorder.bodies]
    assert all(b["context_management"] == management(5_000) for b in whole)
    history_tokens = sum(len(json.dumps(m)) for m in agent.messages) / 4
    report = {
        "requests": len(sent),
        "provider_compactions": len(compaction_blocks(agent.messages)),
        "history_tokens_about": int(history_tokens),
        "largest_prompt_read": max(r.prompt_tokens or 0 for r in sent),
    }
    print("provider compaction through ctxgate:", report)
    assert history_tokens > 2 * WINDOW
    assert report["largest_prompt_read"] < WINDOW


def long_tail(rounds: int, start: int, lines: int = 40) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(start, start + rounds):
        call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash"}
        call["input"] = {"command": f"cat part{n}.log"}
        out.append({"role": "assistant", "content": [call]})
        result = {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": output(call, lines),
        }
        out.append({"role": "user", "content": [result]})
    return out


COMPACTION = {
    "type": "compaction",
    "content": "<summary>The user asked to read every part*.log; parts 0-29 are read.</summary>",
    "encrypted_content": "b3BhcXVl",
}


def compacted_history() -> list[dict[str, Any]]:
    """Thirty rounds the provider compacted away, its compaction turn, then forty more rounds:
    the live part is past ctxgate's threshold, the whole far past the window."""
    turn = {
        "role": "assistant",
        "content": [COMPACTION, {"type": "text", "text": "Reading the remaining parts."}],
    }
    return [
        {"role": "user", "content": "Read every part*.log file, one at a time."},
        *long_tail(30, 0, lines=150),
        turn,
        {"role": "user", "content": "Go on with the next part."},
        *long_tail(22, 30),
    ]


def test_a_compression_after_the_compaction_keeps_its_turn_byte_for_byte(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder]
) -> None:
    server, recorder = proxy
    history = compacted_history()
    cut = compaction_cut(history)
    assert cut == (61, 0)
    raw = client_of(server).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=4096,
        system=SYSTEM,
        messages=history,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        extra_body={"context_management": management(150_000)},
        extra_headers={"anthropic-beta": BETA},
    )
    assert raw.headers["x-ctxgate-compressed"] == "true"
    [sent] = forwarded(sim)
    assert [r for r in sim.received if r.is_summary], "ctxgate did not compress"
    assert sent.problems == [] and sent.outcome == "reply"
    body = sent.body
    # Everything up to and including the compaction turn, as the client sent it...
    assert body["messages"][: cut[0] + 1] == history[: cut[0] + 1]
    assert orjson.dumps(COMPACTION) in sent.raw
    assert body["context_management"] == management(150_000)  # the rebuilt body keeps it
    # ...and the conversation after it compressed, within the window.
    assert len(body["messages"]) < len(history)
    last = body["messages"][-1]["content"]
    assert [{k: v for k, v in b.items() if k != "cache_control"} for b in last] == (
        history[-1]["content"]
    )  # ctxgate spends a free cache breakpoint there
    assert (sent.prompt_tokens or 0) < WINDOW
    client_sent = orjson.loads(recorder.bodies[0])
    assert client_sent["messages"] == history


def test_ctxgate_counts_what_the_provider_reads(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder]
) -> None:
    """count_tokens, relayed and (where the provider lacks it) counted by ctxgate: the whole
    history counts the same as its part from the compaction turn on."""
    server, _ = proxy
    history = compacted_history()
    live = history[compaction_cut(history)[0] :]  # type: ignore[index]
    client = client_of(server)

    def count(messages: list[dict[str, Any]]) -> int:
        answer = client.messages.count_tokens(
            model=MODEL,
            system=SYSTEM,
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        )
        return answer.input_tokens

    relayed = (count(history), count(live))
    dead_only = count(history[:61])  # what the provider would read without the compaction
    sim.messages_api.count_tokens_enabled = False
    counted = (count(history), count(live))
    assert relayed[0] == relayed[1] and counted[0] == counted[1]
    assert counted[0] < WINDOW < dead_only
    assert abs(counted[0] - relayed[0]) < relayed[0] * 0.2  # two tokenizers, same rule


def test_on_demand_compaction_is_left_to_the_provider(
    sim: Simulator, proxy: tuple[ThreadedServer, Recorder]
) -> None:
    """`"compaction": {"type": "summarize"}` asks the provider to summarise the history sent:
    ctxgate forwards it as it came, even past its own threshold."""
    server, recorder = proxy
    history = [{"role": "user", "content": "Read every part."}, *long_tail(26, 0)]
    history[-1]["content"].append({"type": "text", "text": "Now summarise."})
    raw = client_of(server).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=1024,  # about 14K tokens sent: past ctxgate's hygiene line, within the window
        messages=history,  # type: ignore[arg-type]
        extra_body={"compaction": {"type": "summarize"}},
        extra_headers={"anthropic-beta": "compact-2026-09-04"},
    )
    assert raw.headers["x-ctxgate-compressed"] == "false"
    assert raw.headers["x-ctxgate-reason"].startswith("compaction: the provider compacts")
    [sent] = forwarded(sim)
    assert sent.raw == recorder.bodies[0]
    assert sent.body["compaction"] == {"type": "summarize"}
    assert not [r for r in sim.received if r.is_summary]
