"""The Gemini front door for real: raw httpx in Gemini's shapes -> ctxgate -> the simulator's
Gemini dialect, which checks pairing and thought signatures as the real API does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Reply, Simulator
from tests.simulator.agent import ScriptedAgent

MODEL = "gemini-sim"
SMALL = "gemini-small"
WINDOW = 16_384
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "shell",
                "description": "Run a shell command",
                "parametersJsonSchema": {
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                },
            }
        ]
    }
]
SYSTEM = {"role": "user", "parts": [{"text": "You are a coding agent."}]}
THINKING = {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}


@pytest.fixture
def gemini_sim() -> Iterator[Simulator]:
    with Simulator(
        models={
            MODEL: ModelSpec(window=1_000_000),
            SMALL: ModelSpec(window=WINDOW),
            "gemini-status": ModelSpec(window=WINDOW),
            "gemini-event": ModelSpec(window=WINDOW, stream_errors="event"),
        },
        default=ModelSpec(window=1_000_000),
    ) as simulator:
        yield simulator


def _settings(
    sim: Simulator, db_path: str, upstream: dict[str, Any] | None = None, **extra: Any
) -> Any:
    return settings_for(
        sim.gemini_url,
        db_path,
        api_key=None,
        models=[
            {"match": SMALL, "upstream": "sim", "context_length": WINDOW},
            {"match": "*", "upstream": "sim", "context_length": 200_000},
        ],
        upstreams={"sim": {"base_url": sim.gemini_url, "apis": ["gemini"], **(upstream or {})}},
        **extra,
    )


@pytest.fixture
def proxy(gemini_sim: Simulator, db_path: str) -> Iterator[ProxyServer]:
    with ProxyServer(_settings(gemini_sim, db_path)) as server:
        yield server


def _root(proxy: ProxyServer) -> str:
    return f"http://127.0.0.1:{proxy.port}"


def _url(proxy: ProxyServer, model: str, stream: bool) -> str:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"{_root(proxy)}/v1beta/models/{model}:{method}"


def _chunks(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def _generated(sim: Simulator) -> list[Any]:
    return [r for r in sim.gemini_requests if not r.is_summary]


def test_a_plain_answer_streamed_and_not(gemini_sim: Simulator, proxy: ProxyServer) -> None:
    gemini_sim.responder = lambda body: Reply(content="pong " * 12, reasoning_content="think")
    body = {
        "contents": [{"role": "user", "parts": [{"text": "ping"}]}],
        "systemInstruction": SYSTEM,
        "generationConfig": THINKING,
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    headers = {"x-goog-api-key": "client-key", "content-type": "application/json"}
    raw = json.dumps(body).encode()
    answer = httpx.post(_url(proxy, MODEL, False), content=raw, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    parts = data["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "think", "thought": True}
    assert parts[1]["text"] == "pong " * 12 and parts[1]["thoughtSignature"]
    assert data["usageMetadata"]["promptTokenCount"] > 0

    streamed = httpx.post(_url(proxy, MODEL, True), json=body, headers=headers, timeout=30)
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = _chunks(streamed.text)
    assert (
        "".join(
            p.get("text", "")
            for c in chunks
            for p in c["candidates"][0]["content"]["parts"]
            if not p.get("thought")
        )
        == "pong " * 12
    )
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["cachedContentTokenCount"] > 0  # the same prompt again
    assert b"\r\n\r\n" in streamed.content and b"[DONE]" not in streamed.content

    first, second = _generated(gemini_sim)
    assert first.raw == raw  # forwarded as the client's bytes
    assert first.body["safetySettings"] == body["safetySettings"]
    assert first.headers["x-goog-api-key"] == "client-key"
    assert second.path.endswith(":streamGenerateContent")
    assert gemini_sim.gemini.queries[-1] == "alt=sse"
    assert all(not r.problems for r in gemini_sim.received)


def test_function_calls_pair_by_id_and_position(gemini_sim: Simulator, proxy: ProxyServer) -> None:
    """A call without an id and one with, each answered; signatures pass through untouched."""
    gemini_sim.gemini.call_ids = False
    gemini_sim.responder = lambda body: Reply(
        tool_calls=[
            {"name": "shell", "arguments": {"command": "ls"}},
            {"name": "shell", "arguments": {"command": "pwd"}},
        ]
    )
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "look around"}]}]
    body = {"contents": contents, "tools": TOOLS, "generationConfig": THINKING}
    answer = httpx.post(_url(proxy, MODEL, False), json=body, timeout=30).json()
    model_turn = answer["candidates"][0]["content"]
    calls = [p for p in model_turn["parts"] if "functionCall" in p]
    assert len(calls) == 2 and "id" not in calls[0]["functionCall"]
    assert calls[0]["thoughtSignature"] and "thoughtSignature" not in calls[1]
    contents.append(model_turn)
    contents.append(
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "shell", "response": {"output": "a b c"}}},
                {"functionResponse": {"name": "shell", "response": {"output": "/work"}}},
            ],
        }
    )
    gemini_sim.responder = lambda body: Reply(content="done")
    final = httpx.post(_url(proxy, MODEL, True), json=body, timeout=30)
    assert final.status_code == 200, final.text
    sent = _generated(gemini_sim)[-1]
    assert sent.body["contents"][1] == model_turn  # signature and all
    assert not sent.problems
    # The chat view ctxgate reasons on paired them by position.
    assert [m["tool_call_id"] for m in sent.body and _tool_messages(sent.body)] == [
        "gpos_1_0",
        "gpos_1_1",
    ]


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.simulator.gemini_wire import chat_body

    return [m for m in chat_body(body, MODEL)["messages"] if m["role"] == "tool"]


class Agent:
    """A Gemini client that resends its whole history, echoing the model's parts verbatim
    (thoughts and signatures included)."""

    def __init__(self, proxy: ProxyServer, model: str, stream: bool) -> None:
        self.proxy = proxy
        self.model = model
        self.stream = stream
        self.contents: list[dict[str, Any]] = [
            {"role": "user", "parts": [{"text": "Run the listing commands and read their output."}]}
        ]
        self.usages: list[dict[str, Any]] = []
        self.checkpoints: list[str] = []
        self.errors: list[str] = []

    def turn(self) -> bool:
        body = {
            "contents": self.contents,
            "systemInstruction": SYSTEM,
            "tools": TOOLS,
            "generationConfig": THINKING,
        }
        headers = {"x-goog-api-key": "client-key", "x-ctxgate-session-id": "gemini-agent"}
        answer = httpx.post(
            _url(self.proxy, self.model, self.stream), json=body, headers=headers, timeout=60
        )
        if answer.status_code != 200:
            self.errors.append(answer.text)
            return False
        self.checkpoints.append(answer.headers.get("x-ctxgate-checkpoint", ""))
        if self.stream:
            chunks = _chunks(answer.text)
            if any("error" in c for c in chunks):
                self.errors.append(answer.text)
                return False
            parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
            self.usages.append(chunks[-1]["usageMetadata"])
        else:
            data = answer.json()
            parts = data["candidates"][0]["content"]["parts"]
            self.usages.append(data["usageMetadata"])
        self.contents.append({"role": "model", "parts": parts})
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        if not calls:
            return False
        self.contents.append(
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": call["id"],
                            "name": call["name"],
                            "response": {"output": _output(call)},
                        }
                    }
                    for call in calls
                ],
            }
        )
        return True


def _output(call: dict[str, Any]) -> str:
    command = call["args"]["command"]
    return f"$ {command}\n" + "\n".join(
        f"line {n}: handler_{n}(request) returned {n * 7} after {n % 13} retries"
        for n in range(120)
    )


def _signed_parts(contents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each model call part by its id, as the client holds it."""
    return {
        p["functionCall"]["id"]: p
        for c in contents
        if c["role"] == "model"
        for p in c["parts"]
        if "functionCall" in p
    }


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_session_is_compressed_with_signatures_intact(
    gemini_sim: Simulator, db_path: str, stream: bool
) -> None:
    gemini_sim.responder = ScriptedAgent(turns=48, output_lines=10)
    with ProxyServer(_settings(gemini_sim, db_path)) as proxy:
        agent = Agent(proxy, SMALL, stream)
        while agent.turn():
            pass
    assert agent.errors == []
    assert len(agent.usages) == 49
    history = sum(len(json.dumps(c)) for c in agent.contents) / 4
    assert history > 5 * WINDOW
    assert all(not r.problems for r in gemini_sim.received), [
        r.problems for r in gemini_sim.received if r.problems
    ]
    changed = [
        i
        for i in range(1, len(agent.checkpoints))
        if agent.checkpoints[i] != agent.checkpoints[i - 1]
    ]
    assert changed, "no compression happened"
    sent = _generated(gemini_sim)
    assert max(r.prompt_tokens or 0 for r in sent) <= WINDOW
    # Every call the upstream saw again is the client's part exactly, signature included.
    held = _signed_parts(agent.contents)
    forwarded = [
        p
        for r in sent
        for c in r.body["contents"]
        if c.get("role") == "model"
        for p in c["parts"]
        if "functionCall" in p
    ]
    assert forwarded and all(p == held[p["functionCall"]["id"]] for p in forwarded)
    # The thoughts went with their turns: every forwarded model content that holds a call
    # the client sent is the client's content exactly.
    client_models = {
        json.dumps(c["parts"][-1]["functionCall"]["id"]): c
        for c in agent.contents
        if c["role"] == "model" and "functionCall" in c["parts"][-1]
    }
    for r in sent:
        for c in r.body["contents"]:
            calls = [p for p in c["parts"] if "functionCall" in p]
            if c.get("role") == "model" and calls and len(calls) == len(c["parts"]) - 1:
                assert c == client_models[json.dumps(calls[-1]["functionCall"]["id"])]
    after = [i + 1 for i in changed if i + 1 < len(agent.usages)]
    assert after and all(agent.usages[i].get("cachedContentTokenCount", 0) > 0 for i in after)


@pytest.mark.parametrize("model", ["gemini-status", "gemini-event"])
def test_overflow_is_recovered_before_the_first_byte(
    gemini_sim: Simulator, db_path: str, model: str
) -> None:
    """ctxgate believes the window is larger than it is; Google's error teaches it."""
    gemini_sim.responder = ScriptedAgent(turns=100, output_lines=10)
    with ProxyServer(_settings(gemini_sim, db_path)) as proxy:
        agent = Agent(proxy, model, stream=True)
        for _ in range(3):
            assert agent.turn()
        agent.contents.extend(_filler(12, gemini_sim))
        assert agent.turn(), agent.errors
    outcomes = [r.outcome for r in _generated(gemini_sim)]
    assert "overflow" in outcomes and outcomes[-1] == "reply"
    assert all(not r.problems for r in gemini_sim.received)


def _filler(rounds: int, sim: Simulator) -> list[dict[str, Any]]:
    """Earlier tool rounds, each call signed by the provider."""
    out: list[dict[str, Any]] = []
    for n in range(rounds):
        call = {
            "functionCall": {
                "id": f"toolu_fill{n}",
                "name": "shell",
                "args": {"command": f"cat f{n}"},
            }
        }
        call["thoughtSignature"] = sim.gemini.signer.sign(call)
        out.append({"role": "model", "parts": [{"text": f"Round {n}", "thought": True}, call]})
        response = {
            "id": f"toolu_fill{n}",
            "name": "shell",
            "response": {"output": _output(call["functionCall"])},
        }
        out.append({"role": "user", "parts": [{"functionResponse": response}]})
    return out


def test_an_overflow_that_cannot_be_recovered_is_a_400_in_googles_envelope(
    gemini_sim: Simulator, db_path: str
) -> None:
    """Never a 5xx, which Gemini CLI would retry ten times."""
    settings = _settings(gemini_sim, db_path, compression={"engine": "passthrough"})
    with ProxyServer(settings) as proxy:
        body = {"contents": [{"role": "user", "parts": [{"text": "word " * 40_000}]}]}
        for stream in (False, True):
            answer = httpx.post(_url(proxy, "gemini-event", stream), json=body, timeout=60)
            assert answer.status_code == 400
            error = answer.json()["error"]
            assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
            assert "exceeds the maximum number of tokens allowed (16384)" in error["message"]


def test_a_broken_signature_is_refused_like_the_real_api(
    gemini_sim: Simulator, proxy: ProxyServer
) -> None:
    """The simulator's own check, through ctxgate: what ctxgate must never cause."""
    call = {"functionCall": {"id": "c1", "name": "shell", "args": {"command": "ls"}}}
    signed = {**call, "thoughtSignature": gemini_sim.gemini.signer.sign(call)}
    answer = {"functionResponse": {"id": "c1", "name": "shell", "response": {"output": "x"}}}

    def body(model_part: dict[str, Any]) -> dict[str, Any]:
        return {
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [model_part]},
                {"role": "user", "parts": [answer]},
            ],
            "tools": TOOLS,
        }

    gemini_sim.responder = lambda body: Reply(content="ok")
    assert httpx.post(_url(proxy, MODEL, False), json=body(signed), timeout=30).status_code == 200
    for broken, words in (
        (call, "missing a thought_signature"),
        (
            {**signed, "functionCall": {**call["functionCall"], "args": {"command": "rm"}}},
            "Corrupted",
        ),
    ):
        refused = httpx.post(_url(proxy, MODEL, False), json=body(broken), timeout=30)
        assert refused.status_code == 400 and words in refused.json()["error"]["message"]


def test_keys_are_forwarded_or_replaced(gemini_sim: Simulator, db_path: str) -> None:
    gemini_sim.responder = lambda body: Reply(content="ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with ProxyServer(_settings(gemini_sim, db_path)) as proxy:
        assert (
            httpx.post(_url(proxy, MODEL, False) + "?key=query-key", json=body).status_code == 200
        )
    sent = gemini_sim.received[-1]
    assert sent.headers["x-goog-api-key"] == "query-key"
    assert "key=" not in gemini_sim.gemini.queries[-1]

    gemini_sim.required_api_key = "upstream-key"
    settings = _settings(
        gemini_sim, db_path, upstream={"api_key": "upstream-key"}, auth={"keys": ["proxy-key"]}
    )
    with ProxyServer(settings) as proxy:
        for how in ({"headers": {"x-goog-api-key": "proxy-key"}}, {"params": {"key": "proxy-key"}}):
            answer = httpx.post(_url(proxy, MODEL, True), json=body, timeout=30, **how)  # type: ignore[arg-type]
            assert answer.status_code == 200, answer.text
            assert gemini_sim.received[-1].headers["x-goog-api-key"] == "upstream-key"
            assert gemini_sim.gemini.queries[-1] == "alt=sse"
        refused = httpx.post(
            _url(proxy, MODEL, False), json=body, headers={"x-goog-api-key": "bad"}
        )
        assert refused.status_code == 401
        assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
        listed = httpx.get(f"{_root(proxy)}/v1beta/models", params={"key": "proxy-key"})
        assert listed.status_code == 200 and listed.json()["models"][0]["name"].startswith(
            "models/"
        )
        assert gemini_sim.received[-1].headers["x-goog-api-key"] == "upstream-key"


def test_count_tokens_is_relayed_or_counted(gemini_sim: Simulator, proxy: ProxyServer) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "count these words please"}]}]}
    url = f"{_root(proxy)}/v1beta/models/{MODEL}:countTokens"
    relayed = httpx.post(url, json=body)
    assert relayed.status_code == 200 and gemini_sim.received[-1].path.endswith(":countTokens")
    gemini_sim.gemini.count_tokens_enabled = False
    counted = httpx.post(url, json={"generateContentRequest": {"model": MODEL, **body}})
    assert counted.status_code == 200
    assert abs(counted.json()["totalTokens"] - relayed.json()["totalTokens"]) <= 8


def test_errors_use_googles_envelope(proxy: ProxyServer) -> None:
    answer = httpx.post(_url(proxy, MODEL, False), content=b"{not json")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert "not valid JSON" in error["message"]
    missing = httpx.post(_url(proxy, MODEL, False), json={"contents": "x"})
    assert missing.json()["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("stream", [False, True])
def test_the_recall_tool_is_answered_and_hidden(
    gemini_sim: Simulator, db_path: str, stream: bool
) -> None:
    """After a compression the model reads an archived original back; the client never sees
    the call, and the round sent back carries the model's signed call as it came."""
    scripted = ScriptedAgent(turns=30, output_lines=10)
    recalled: list[int] = []

    def responder(body: dict[str, Any]) -> Reply | None:
        offered = "ctxgate_recall" in json.dumps(body.get("tools"))
        answered = any(
            m.get("role") == "tool" and "m1" in str(m.get("content")) for m in body["messages"]
        )
        if offered and not answered and len(recalled) < 2:
            recalled.append(len(body["messages"]))
            return Reply(
                tool_calls=[{"name": "ctxgate_recall", "arguments": {"handle": "m1"}}],
                reasoning_content="I need the original.",
            )
        return scripted(body)

    gemini_sim.responder = responder
    with ProxyServer(_settings(gemini_sim, db_path)) as proxy:
        agent = Agent(proxy, SMALL, stream)
        while agent.turn():
            pass
    assert agent.errors == [] and recalled
    assert "ctxgate_recall" not in json.dumps(agent.contents)
    rounds = [
        (r, p)
        for r in _generated(gemini_sim)
        for c in r.body["contents"]
        if c["role"] == "model"
        for p in c["parts"]
        if p.get("functionCall", {}).get("name") == "ctxgate_recall"
    ]
    assert rounds, "no recall round was sent"
    assert all(not r.problems for r in gemini_sim.received), [
        r.problems for r in gemini_sim.received if r.problems
    ]
    for _, call in rounds:
        assert gemini_sim.gemini.signer.valid(call["thoughtSignature"], call)
        assert call["thoughtSignature"] != "skip_thought_signature_validator"
