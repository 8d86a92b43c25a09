"""Only the protected opening is left, and it is over the window: a forced compression clips
its tool outputs (keeping every call paired with its result) so the retried request fits."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from compression import check_invariants
from session.identity import scope_for
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator

WINDOW = 16_384
MODEL = "agent-16k"
SYSTEM = "You are a coding agent. Use the tools to inspect the repository."


def log_lines(count: int) -> str:
    return "\n".join(
        f"2026-11-{n % 28 + 1:02d} worker-{n % 13} request {n * 7919 % 100_003} "
        f"handled in {n % 977} ms status={200 + n % 5}"
        for n in range(count)
    )


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def heavy_opening() -> list[dict[str, Any]]:
    """[system, user, a tool call with a ~30K-token result, another call and its result]."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find why the worker pool stalls in logs/worker.log."},
        call("c1", "read_file", '{"path": "logs/worker.log"}'),
        {"role": "tool", "tool_call_id": "c1", "content": log_lines(1300)},
        call("c2", "terminal", '{"command": "grep -c status=503 logs/worker.log"}'),
        {"role": "tool", "tool_call_id": "c2", "content": "0\nexit code: 0"},
    ]


@pytest.mark.parametrize("believed", [WINDOW, 4 * WINDOW], ids=["known", "unknown"])
def test_an_opening_over_the_window_is_answered(db_path: str, believed: int) -> None:
    models = [{"match": "*", "upstream": "sim", "context_length": believed}]
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True) as sim:
        with ProxyServer(settings_for(sim.base_url, db_path, models=models)) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-a", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=heavy_opening(),  # type: ignore[arg-type]
                extra_headers={"X-Session-Id": f"heavy-{believed}"},
            )
        answered = raw.parse()
        assert answered.choices[0].message is not None
        assert raw.headers["x-ctxgate-compressed"] == "true"
        sent = [r for r in sim.chat_requests if not r.is_summary]
        final = sent[-1]
        assert final.outcome != "overflow"
        assert final.problems == []
        messages = final.body["messages"]
        check_invariants(messages)
        # The opening's shape is intact: every call still answered by its own result.
        assert [m["role"] for m in messages] == [m["role"] for m in heavy_opening()]
        assert [m.get("tool_call_id") for m in messages] == [
            m.get("tool_call_id") for m in heavy_opening()
        ]
        assert messages[1] == heavy_opening()[1]
        clipped = messages[3]["content"]
        assert len(clipped) < len(heavy_opening()[3]["content"]) // 2
        assert clipped.startswith("2026-11-01 worker-0")  # the head of the output is kept


def test_the_manual_compression_of_a_heavy_opening_clips_it(sim: Simulator, db_path: str) -> None:
    models = [{"match": "*", "upstream": "sim", "context_length": WINDOW}]
    settings = settings_for(
        sim.base_url,
        db_path,
        models=models,
        compression={"background": False},
        auth={"admin_key": "adm"},
    )
    with ProxyServer(settings) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-a", max_retries=0)
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=heavy_opening(),  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": "heavy-manual"},
        )
        root = proxy.base_url.removesuffix("/v1")
        url = f"{root}/admin/sessions/{scope_for('sk-a')}/heavy-manual"
        answer = httpx.post(f"{url}/compress", headers={"Authorization": "Bearer adm"})
        audit = httpx.get(f"{url}/audit", headers={"Authorization": "Bearer adm"}).json()
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["compressed"] is True, result
    assert result["tokens_after"] < result["tokens_before"] // 2
    assert audit["missing"] == [] and 3 in audit["replaced"]


def test_a_streamed_heavy_opening_is_answered(db_path: str) -> None:
    models = [{"match": "*", "upstream": "sim", "context_length": 4 * WINDOW}]
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}, validate_messages=True) as sim:
        with ProxyServer(settings_for(sim.base_url, db_path, models=models)) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-a", max_retries=0)
            stream = client.chat.completions.create(
                model=MODEL,
                messages=heavy_opening(),  # type: ignore[arg-type]
                stream=True,
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        sent = [r for r in sim.chat_requests if not r.is_summary]
        assert [r.outcome == "overflow" for r in sent] == [True, False]
