"""The simulator's Gemini dialect, straight (no ctxgate): Google's shapes, its overflow error,
and the checks the real API makes on pairing and thought signatures."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.simulator import ModelSpec, Reply, Simulator
from tests.simulator.fixtures import simulator_fixture

MODEL = "gemini-small"


sim = simulator_fixture({MODEL: ModelSpec(window=2_000)})


def _post(sim: Simulator, body: Any, stream: bool = False, **kwargs: Any) -> httpx.Response:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return httpx.post(f"{sim.gemini_url}/models/{MODEL}:{method}", json=body, **kwargs)


def _turn(call: dict[str, Any], response_id: str | None = "c1") -> list[dict[str, Any]]:
    answer: dict[str, Any] = {"name": "ls", "response": {"output": "a"}}
    if response_id:
        answer["id"] = response_id
    return [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [call]},
        {"role": "user", "parts": [{"functionResponse": answer}]},
    ]


def test_answers_streams_and_usage_in_googles_shape(sim: Simulator) -> None:
    sim.responder = lambda body: Reply(
        content="x" * 60, tool_calls=[{"name": "ls", "arguments": {"dir": "."}}]
    )
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    data = _post(sim, body).json()
    parts = data["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "x" * 60}
    assert parts[1]["functionCall"]["name"] == "ls" and parts[1]["thoughtSignature"]
    assert data["usageMetadata"]["promptTokenCount"] == sim.received[-1].prompt_tokens
    streamed = _post(sim, body, stream=True)
    frames = streamed.content.split(b"\r\n\r\n")
    assert frames[-1] == b"" and all(f.startswith(b"data: {") for f in frames[:-1])
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert len(chunks) == 4  # three pieces of text, the call
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, None, None, "STOP"]
    assert chunks[-1]["usageMetadata"]["cachedContentTokenCount"] > 0
    listed = httpx.get(f"{sim.gemini_url}/models").json()
    assert listed["models"][0]["inputTokenLimit"] == 2_000


def test_overflow_is_googles_400(sim: Simulator) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "word " * 3_000}]}]}
    answer = _post(sim, body)
    assert answer.status_code == 400
    prompt = sim.received[-1].prompt_tokens
    assert answer.json() == {
        "error": {
            "code": 400,
            "message": f"The input token count ({prompt}) exceeds the maximum number of tokens "
            "allowed (2000).",
            "status": "INVALID_ARGUMENT",
        }
    }
    sim.models[MODEL] = ModelSpec(window=2_000, stream_errors="event")
    streamed = _post(sim, body, stream=True)
    assert streamed.status_code == 200
    assert json.loads(streamed.text[6:])["error"]["code"] == 400


def test_pairing_and_signatures_are_checked(sim: Simulator) -> None:
    sim.responder = lambda body: Reply(content="ok")
    call = {"functionCall": {"id": "c1", "name": "ls", "args": {"dir": "."}}}
    signed = {**call, "thoughtSignature": sim.gemini.signer.sign(call)}
    assert _post(sim, {"contents": _turn(signed)}).status_code == 200
    dummy = {**call, "thoughtSignature": "skip_thought_signature_validator"}
    assert _post(sim, {"contents": _turn(dummy)}).status_code == 200
    moved = {
        "functionCall": {"id": "c1", "name": "ls", "args": {"dir": "/"}},
        "thoughtSignature": signed["thoughtSignature"],
    }
    cases = [
        (_turn(call), "missing a thought_signature"),
        (_turn(moved), "Corrupted thought signature."),
        (_turn(signed, "other"), "does not match any function call id"),
        (_turn(signed)[:1] + _turn(signed)[2:], "comes immediately after a function call turn"),
        ([*_turn(signed)[:2], {"role": "user", "parts": [{"text": "no"}]}], "number of function"),
    ]
    for contents, words in cases:
        refused = _post(sim, {"contents": contents})
        assert refused.status_code == 400, words
        assert words in refused.json()["error"]["message"]
        assert sim.received[-1].problems
    # An older turn's unsigned call is not checked for presence, as on the real API.
    older = [*_turn(call), {"role": "model", "parts": [{"text": "done"}]}]
    older.append({"role": "user", "parts": [{"text": "next"}]})
    assert _post(sim, {"contents": older}).status_code == 200


def test_the_key_is_checked_in_the_header_or_the_query(sim: Simulator) -> None:
    sim.required_api_key = "k"
    sim.responder = lambda body: Reply(content="ok")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    assert _post(sim, body).status_code == 403
    assert _post(sim, body, headers={"x-goog-api-key": "bad"}).json()["error"]["message"] == (
        "API key not valid. Please pass a valid API key."
    )
    assert _post(sim, body, headers={"x-goog-api-key": "k"}).status_code == 200
    assert _post(sim, body, params={"key": "k"}).status_code == 200
