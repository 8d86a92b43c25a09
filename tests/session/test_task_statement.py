"""A task statement one compression had to clip is carried whole again by the next one that
has room: it is read back from the client's own list (the client resends it with every
request), by the handle written into the clip, not from the clip the view holds."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from session.identity import scope_for
from tests.servers import ProxyServer, settings_for
from tests.simulator import Simulator

SESSION = "task-statement"
MODELS = [{"match": "*", "upstream": "sim", "context_length": 32_000}]
STATEMENT = (
    "Fix the flaky retry in worker/pool.py: a job that times out is retried forever. "
    + " ".join(
        f"Observed case {n}: job {n * 7919 % 10_007} hung after retry {n % 9}." for n in range(60)
    )
    + " Never change the public API of worker/pool.py."
)


def turns(start: int, end: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(start, end):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{n}.py"})},
        }
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        body = "\n".join(f"def f{n}_{i}(x):\n    return x * {i} + {n}" for i in range(90))
        out.append({"role": "tool", "tool_call_id": f"c{n}", "content": body})
    return out


def history(rounds: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": STATEMENT},
        *turns(0, 4),
        {"role": "user", "content": "Go on, and keep the logs quiet."},
        *turns(4, rounds),
    ]


def send(proxy: ProxyServer, messages: list[dict[str, Any]]) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-a", max_retries=0)
    client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"X-Session-Id": SESSION},
    )


def compress(proxy: ProxyServer) -> None:
    root = proxy.base_url.removesuffix("/v1")
    url = f"{root}/admin/sessions/{scope_for('sk-a')}/{SESSION}/compress"
    answer = httpx.post(url, headers={"Authorization": "Bearer adm"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["compressed"] is True, answer.text


def received(sim: Simulator) -> str:
    request = [r for r in sim.chat_requests if not r.is_summary][-1]
    return "\n".join(str(m.get("content") or "") for m in request.body["messages"])


def test_a_clipped_task_statement_is_carried_whole_again_where_it_fits(
    sim: Simulator, db_path: str
) -> None:
    def settings(options: dict[str, Any]) -> Any:
        compression = {"background": False, "options": options}
        return settings_for(
            sim.base_url, db_path, models=MODELS, compression=compression, auth={"admin_key": "adm"}
        )

    # A deployment whose user words' budget cannot hold the statement clips it, with a handle.
    with ProxyServer(settings({"user_share": 0.01, "protect_first_n": 0})) as proxy:
        send(proxy, history(20))
        compress(proxy)
        send(proxy, history(21))
    clipped = received(sim)
    assert STATEMENT not in clipped
    assert STATEMENT[:60] in clipped and "[archived: m1]" in clipped
    # With room for it (the default budget, on the same database), the next compression
    # carries the whole statement, read from the client's list.
    with ProxyServer(settings({})) as proxy:
        send(proxy, history(28))
        compress(proxy)
        send(proxy, history(29))
    assert STATEMENT in received(sim)
