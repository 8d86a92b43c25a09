"""The Anthropic Messages front door for real: the `anthropic` SDK -> ctxgate -> the simulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.proxy.doors.messages.answers import accumulate
from tests.servers import ProxyServer, settings_for
from tests.simulator import Disconnect, ModelSpec, Reply, Simulator, StreamError
from tests.simulator.agent import ScriptedAgent

MODEL = "claude-sim"
SMALL = "claude-small"
KEY = "sk-ant-client"
BETA = "interleaved-thinking-2025-05-14"
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


@pytest.fixture
def anthropic_sim() -> Iterator[Simulator]:
    with Simulator(
        models={
            MODEL: ModelSpec(window=200_000, dialect="anthropic"),
            SMALL: ModelSpec(window=16_384, dialect="anthropic"),
            "claude-status": ModelSpec(window=16_384, dialect="anthropic"),
            "claude-event": ModelSpec(window=16_384, dialect="anthropic", stream_errors="event"),
        },
        default=ModelSpec(window=200_000, dialect="anthropic"),
    ) as simulator:
        yield simulator


def _settings(sim: Simulator, db_path: str, **compression: Any) -> Any:
    return settings_for(
        sim.url + "/v1",
        db_path,
        api_key=None,
        models=[
            {"match": SMALL, "upstream": "sim", "context_length": 16_384},
            {"match": "*", "upstream": "sim", "context_length": 200_000},
        ],
        compression=compression or None,
        upstreams={"sim": {"base_url": sim.url + "/v1", "apis": ["chat", "messages"]}},
    )


@pytest.fixture
def proxy(anthropic_sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    with ProxyServer(_settings(anthropic_sim, db_path)) as server:
        yield server


def _root(proxy: ProxyServer) -> str:
    return f"http://127.0.0.1:{proxy.port}"


def _client(proxy: ProxyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=_root(proxy), api_key=KEY, max_retries=0, timeout=60)


def _messages(sim: Simulator) -> list[Any]:
    return [r for r in sim.received if r.path.endswith("/messages") and not r.is_summary]


def test_sync_async_and_streaming_sdk_calls(anthropic_sim: Simulator, proxy: ProxyServer) -> None:
    anthropic_sim.responder = lambda body: Reply(content="pong")
    extra = {
        "metadata": {"user_id": json.dumps({"session_id": "sess-42", "device_id": "d"})},
        "extra_headers": {"anthropic-beta": BETA},
        "extra_body": {"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}},
    }
    answer = _client(proxy).messages.create(
        model=MODEL,
        max_tokens=32_000,
        system="Be terse.",
        messages=[{"role": "user", "content": "ping"}],
        **extra,  # type: ignore[arg-type]
    )
    assert answer.content[0].text == "pong"  # type: ignore[union-attr]

    async def twice() -> str:
        client = anthropic.AsyncAnthropic(base_url=_root(proxy), api_key=KEY, max_retries=0)
        reply = await client.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "ping"}]
        )
        return reply.content[0].text  # type: ignore[union-attr]

    assert asyncio.run(twice()) == "pong"
    with _client(proxy).messages.stream(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "ping"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "pong" and final.usage.input_tokens > 0

    first, *_ = _messages(anthropic_sim)
    assert first.headers["anthropic-version"] and first.headers["anthropic-beta"] == BETA
    assert first.headers.get("authorization") == f"Bearer {KEY}"  # this SDK sends Bearer
    assert first.body["context_management"] == extra["extra_body"]["context_management"]
    assert first.body["max_tokens"] == 32_000 and first.body["system"] == "Be terse."
    assert all(not r.problems for r in anthropic_sim.received)


def test_head_probe_x_api_key_and_errors_in_the_anthropic_envelope(
    anthropic_sim: Simulator, proxy: ProxyServer
) -> None:
    assert httpx.head(_root(proxy) + "/").status_code == 200
    anthropic_sim.responder = lambda body: Reply(content="pong")
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    assert httpx.post(_root(proxy) + "/v1/messages", json=body, headers=headers).status_code == 200
    assert anthropic_sim.received[-1].headers.get("x-api-key") == KEY
    with pytest.raises(anthropic.BadRequestError) as caught:
        _client(proxy).messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "nobody", "content": "x"}],  # type: ignore[typeddict-item]
        )
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.0.role: Input should be 'user' or 'assistant'.",
        },
    }


class Agent:
    """A Messages client that resends its whole history, echoing thinking blocks verbatim."""

    def __init__(self, proxy: ProxyServer, model: str, stream: bool) -> None:
        self.client = _client(proxy)
        self.model = model
        self.stream = stream
        self.messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Run the listing commands and read their output."}
        ]
        self.usages: list[dict[str, int]] = []
        self.checkpoints: list[str] = []

    def turn(self) -> bool:
        """One request; False once the model answers without a tool call."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": 32_000,
            "system": [
                {
                    "type": "text",
                    "text": "You are a coding agent.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            "messages": self._marked(),
            "tools": TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "extra_headers": {"x-claude-code-session-id": "agent-1"},
        }
        if self.stream:
            with self.client.messages.with_streaming_response.create(stream=True, **kwargs) as raw:
                self.checkpoints.append(raw.headers.get("x-ctxgate-checkpoint", ""))
                message = accumulate(raw.iter_lines())
        else:
            raw = self.client.messages.with_raw_response.create(**kwargs)
            self.checkpoints.append(raw.headers.get("x-ctxgate-checkpoint", ""))
            message = raw.parse().model_dump(exclude_none=True)
        self.usages.append(message["usage"])
        content = message["content"]
        self.messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return False
        self.messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": _output(c)}
                    for c in calls
                ],
            }
        )
        return True

    def _marked(self) -> list[dict[str, Any]]:
        """Claude Code's pattern: one breakpoint on the last block of the last message."""
        out = [dict(m) for m in self.messages]
        last = out[-1]
        blocks = last["content"]
        if isinstance(blocks, str):
            blocks = [{"type": "text", "text": blocks}]
        last["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]
        return out


def _output(call: dict[str, Any]) -> str:
    command = call["input"]["command"]
    return f"$ {command}\n" + "\n".join(
        f"line {n}: handler_{n}(request) returned {n * 7} after {n % 13} retries"
        for n in range(120)
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_session_is_compressed_and_cached(
    anthropic_sim: Simulator, db_path: str, stream: bool
) -> None:
    anthropic_sim.responder = ScriptedAgent(turns=48, output_lines=10)
    with ProxyServer(_settings(anthropic_sim, db_path)) as proxy:
        agent = Agent(proxy, SMALL, stream)
        while agent.turn():
            pass
    sent = _messages(anthropic_sim)
    assert all(not r.problems for r in anthropic_sim.received), [
        r.problems for r in anthropic_sim.received if r.problems
    ]
    history = sum(len(json.dumps(m)) for m in agent.messages) / 4
    assert history > 5 * 16_384
    assert len(agent.usages) == 49
    changed = [
        i
        for i in range(1, len(agent.checkpoints))
        if agent.checkpoints[i] != agent.checkpoints[i - 1]
    ]
    assert changed, "no compression happened"
    after = [i + 1 for i in changed if i + 1 < len(agent.usages)]
    assert after and all(agent.usages[i]["cache_read_input_tokens"] > 0 for i in after), [
        agent.usages[i] for i in after
    ]
    assert max(r.prompt_tokens or 0 for r in sent) <= 16_384


@pytest.mark.parametrize("model", ["claude-status", "claude-event"])
def test_overflow_is_recovered_before_the_first_byte(
    anthropic_sim: Simulator, db_path: str, model: str
) -> None:
    """ctxgate believes the window is larger than it is; the provider's error teaches it."""
    anthropic_sim.responder = ScriptedAgent(turns=100, output_lines=10)
    settings = _settings(anthropic_sim, db_path)
    with ProxyServer(settings) as proxy:
        agent = Agent(proxy, model, stream=True)
        agent.messages.extend(_filler(12, anthropic_sim))
        assert agent.turn()
    outcomes = [r.outcome for r in _messages(anthropic_sim)]
    assert outcomes[0] == "overflow" and outcomes[-1] == "reply"


def _filler(rounds: int, sim: Simulator) -> list[dict[str, Any]]:
    """Earlier tool rounds, each with a thinking block the provider signed."""
    out: list[dict[str, Any]] = []
    for n in range(rounds):
        thought = f"Round {n}: read f{n}."
        thinking = {
            "type": "thinking",
            "thinking": thought,
            "signature": sim.messages_api.signer.sign(thought),
        }
        call = {
            "type": "tool_use",
            "id": f"toolu_fill{n}",
            "name": "Bash",
            "input": {"command": f"cat f{n}"},
        }
        out.append({"role": "assistant", "content": [thinking, call]})
        out.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call["id"], "content": _output(call)}
                ],
            }
        )
    return out


def test_count_tokens_is_relayed_or_counted(anthropic_sim: Simulator, proxy: ProxyServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "How long is this?"}]}
    relayed = _client(proxy).messages.count_tokens(**body)  # type: ignore[arg-type]
    assert relayed.input_tokens == anthropic_sim.received[-1].prompt_tokens
    anthropic_sim.messages_api.count_tokens_enabled = False
    counted = _client(proxy).messages.count_tokens(**body)  # type: ignore[arg-type]
    assert 5 <= counted.input_tokens <= 40


def test_keys_are_checked_and_a_messages_only_upstream_gets_its_own(
    anthropic_sim: Simulator, db_path: str
) -> None:
    anthropic_sim.responder = ScriptedAgent(turns=48, output_lines=10)
    settings = settings_for(
        anthropic_sim.url + "/v1",
        db_path,
        models=[{"match": "*", "upstream": "sim", "context_length": 16_384}],
        upstreams={
            "sim": {"base_url": anthropic_sim.url + "/v1", "apis": ["messages"], "api_key": "sk-up"}
        },
        auth={"keys": [KEY]},
    )
    with ProxyServer(settings) as proxy:
        wrong = anthropic.Anthropic(base_url=_root(proxy), api_key="nope", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as caught:
            wrong.messages.create(
                model=SMALL, max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert caught.value.body["type"] == "error"  # type: ignore[index]
        agent = Agent(proxy, SMALL, stream=True)
        while agent.turn():
            pass
    assert all(r.headers.get("x-api-key") == "sk-up" for r in anthropic_sim.received)
    assert all("authorization" not in r.headers for r in anthropic_sim.received)
    summary_calls = [r for r in anthropic_sim.received if r.is_summary]
    assert summary_calls and all(r.path.endswith("/messages") for r in summary_calls)
    assert all(not r.problems for r in anthropic_sim.received)


def test_an_error_event_mid_stream_reaches_the_client(
    anthropic_sim: Simulator, proxy: ProxyServer
) -> None:
    anthropic_sim.enqueue(
        StreamError(after_chunks=2, error={"type": "overloaded_error", "message": "busy"}),
        Disconnect(after_chunks=2),
    )
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError) as caught:
            with _client(proxy).messages.stream(
                model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "ping"}]
            ) as stream:
                "".join(stream.text_stream)
        assert caught.value.body["type"] == "error"  # type: ignore[index]


def test_count_tokens_errors_use_the_anthropic_envelope(proxy: ProxyServer) -> None:
    answer = httpx.post(_root(proxy) + "/v1/messages/count_tokens", json={"messages": []})
    assert answer.status_code == 400
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_a_growing_session_of_large_bodies_reaches_the_upstream_as_sent(
    anthropic_sim: Simulator, proxy: ProxyServer
) -> None:
    """The SDK writes compact JSON, so each request after the first is read as the one before
    with turns added: what the upstream receives is still exactly what was sent, and a bad
    turn added to a body read before is refused before any call."""
    client = _client(proxy)
    system = [{"type": "text", "text": "You are Claude Code. Follow the rules. " * 1200}]
    # The SDK writes `messages` before `system`: the turns alone pass the 512 bytes that
    # tell conversations apart, as a real session's do after its first request.
    history: list[Any] = [{"role": "user", "content": "Here is the plan. " * 40}]
    history.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    for step in range(4):
        history.append({"role": "user", "content": [{"type": "text", "text": f"step {step} é"}]})
        client.messages.create(model=MODEL, max_tokens=100, system=system, messages=history)
        sent = _messages(anthropic_sim)[-1]
        assert sent.body["messages"] == history and sent.body["system"] == system
        assert len(sent.raw) > 40_000
        history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    calls = len(_messages(anthropic_sim))
    broken = [*history, {"role": "user", "content": 7}]
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.10"):
        client.messages.create(model=MODEL, max_tokens=100, system=system, messages=broken)
    assert len(_messages(anthropic_sim)) == calls
