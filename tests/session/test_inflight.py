"""Compression in flight: a client that resends its whole growing history never overflows."""

from __future__ import annotations

import threading
from typing import Any

import openai
import pytest

from compression import check_invariants
from compression.counting.tokens import counter_for_model
from session.identity import scope_for
from storage import SessionKey
from tests.proxy.agent_loop import CONSTRAINTS, SYSTEM, AgentLoop
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Simulator
from tests.simulator.fixtures import simulator_fixture

WINDOW = 8192
MODEL = "agent-8k"


sim8k = simulator_fixture({MODEL: ModelSpec(window=WINDOW)}, validate_messages=True)


def small_model_settings(
    sim: Simulator, db_path: str, context_length: int = WINDOW, **extra: Any
) -> Any:
    models = [{"match": "*", "upstream": "sim", "context_length": context_length}]
    return settings_for(sim.base_url, db_path, models=models, **extra)


def client_for(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-agent", max_retries=0)


def grow(loop: AgentLoop, target_tokens: int, max_steps: int = 200) -> int:
    """Run the agent until its full history reaches `target_tokens`; returns the steps run."""
    counter = counter_for_model("gpt-4o")
    steps = 0
    while counter.count_messages(loop.messages) < target_tokens and steps < max_steps:
        loop.step(steps)
        steps += 1
    return steps


def assert_every_forwarded_request_is_sound(sim: Simulator) -> None:
    ordinary = [r for r in sim.chat_requests if not r.is_summary]
    assert ordinary
    for received in ordinary:
        assert received.outcome != "overflow", f"request of {received.prompt_tokens} tokens"
        assert received.problems == []
        check_invariants(received.body["messages"])
        assert received.body["messages"][0] == {"role": "system", "content": SYSTEM}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_agent_loop_grown_to_ten_windows(sim8k: Simulator, db_path: str, stream: bool) -> None:
    with ProxyServer(small_model_settings(sim8k, db_path)) as proxy:
        loop = AgentLoop(client_for(proxy), MODEL, stream=stream)
        loop.script(sim8k)
        grow(loop, 10 * WINDOW)
    assert_every_forwarded_request_is_sound(sim8k)
    ordinary = [r for r in sim8k.chat_requests if not r.is_summary]
    late = ordinary[-1].body["messages"]
    texts = [m.get("content") for m in late if m.get("role") in ("user", "assistant")]
    joined = "\n".join(t for t in texts if isinstance(t, str))
    for constraint in CONSTRAINTS:
        assert constraint in joined, "an early user constraint was lost"
    assert "true" in loop.compressed_headers
    billed = sum(r.prompt_tokens or 0 for r in sim8k.chat_requests)  # summaries included
    ratio = billed / sum(loop.full_tokens)
    print(
        f"\nbilled prompt tokens {billed:,} vs full history {sum(loop.full_tokens):,}: "
        f"{ratio:.1%} over {len(loop.full_tokens)} requests, "
        f"{len(sim8k.summary_requests)} summaries"
    )
    assert ratio < 0.5


def test_restart_keeps_using_the_stored_checkpoint(sim8k: Simulator, db_path: str) -> None:
    settings = small_model_settings(sim8k, db_path)
    with ProxyServer(settings) as proxy:
        loop = AgentLoop(client_for(proxy), MODEL, session_id="restart-me")
        loop.script(sim8k)
        grow(loop, 3 * WINDOW)
        assert "true" in loop.compressed_headers
    sim8k.clear()
    loop.script(sim8k)
    with ProxyServer(settings) as proxy:
        loop.client = client_for(proxy)
        loop.step(1000)
    # The new process starts from the stored checkpoint: it forwards the compressed view, and a
    # compression the step makes due summarizes that view, never the whole history again.
    summaries = [r for r in sim8k.chat_requests if r.is_summary]
    first = next(r for r in sim8k.chat_requests if not r.is_summary)
    assert len(first.body["messages"]) < len(loop.messages) - 2
    assert first.outcome != "overflow"
    assert all((r.prompt_tokens or 0) < WINDOW for r in summaries)


def test_concurrent_requests_of_one_session_compress_once(sim8k: Simulator, db_path: str) -> None:
    settings = small_model_settings(sim8k, db_path, compression={"background": False})
    with ProxyServer(settings) as proxy:
        loop = AgentLoop(client_for(proxy), MODEL, session_id="twins")
        loop.script(sim8k)
        # Grow just under the line without the proxy compressing (history built locally).
        while True:
            loop.messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{len(loop.messages)}",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                }
            )
            loop.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": f"c{len(loop.messages) - 1}",
                    "content": "x = 1\n" * 300,
                }
            )
            if counter_for_model("gpt-4o").count_messages(loop.messages) > WINDOW:
                break
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                loop.client.chat.completions.create(
                    model=MODEL,
                    messages=loop.messages,  # type: ignore[arg-type]
                    extra_headers={"X-Session-Id": "twins"},
                )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        detail = proxy.run(
            proxy.services.store.session_detail(SessionKey(scope_for("sk-agent"), "twins"))
        )
    committed = [e for e in detail.events if e.outcome in ("compressed", "fallback")]
    assert len(committed) == 1
    assert len(sim8k.summary_requests) == 1


@pytest.mark.parametrize("dialect", ["numberless", "bare413"])
def test_refusals_without_numbers_teach_a_window_so_later_turns_fit(
    db_path: str, dialect: str
) -> None:
    """ctxgate believes the window is 64K; the provider's real one is 8K and its refusals state
    no figure. The first refusal steps the assumed window down the probe tiers; the turns
    after it are compressed to fit before they are sent, not after a refusal each."""
    spec = ModelSpec(window=WINDOW, dialect=dialect)
    with Simulator(models={MODEL: spec}, validate_messages=True) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=8 * WINDOW)) as proxy:
            loop = AgentLoop(client_for(proxy), MODEL, session_id=f"numberless-{dialect}")
            loop.script(sim)
            grow(loop, 6 * WINDOW)
            learned = proxy.services.models.windows.get(MODEL)
        ordinary = [r for r in sim.chat_requests if not r.is_summary]
        overflows = [r for r in ordinary if r.outcome == "overflow"]
        assert 1 <= len(overflows) <= 2, [r.prompt_tokens for r in overflows]
        assert learned is not None and learned < WINDOW
        for received in ordinary:
            check_invariants(received.body["messages"])
            assert received.problems == []
    assert len(loop.responses) == len(loop.full_tokens)  # every request got an answer


@pytest.mark.parametrize(
    "dialect",
    ["openai", "vllm", "llamacpp", "anthropic", "anthropic413", "deepseek", "tgi", "numberless"],
)
def test_overflow_errors_of_each_dialect_are_recovered(db_path: str, dialect: str) -> None:
    """ctxgate believes the window is 32K; the provider's real window is 8K."""
    with Simulator(
        models={MODEL: ModelSpec(window=WINDOW, dialect=dialect)}, validate_messages=True
    ) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=4 * WINDOW)) as proxy:
            loop = AgentLoop(client_for(proxy), MODEL, session_id=f"dialect-{dialect}")
            loop.script(sim)
            grow(loop, 5 * WINDOW)
        ordinary = [r for r in sim.chat_requests if not r.is_summary]
        overflows = [r for r in ordinary if r.outcome == "overflow"]
        assert overflows, "the provider never refused: the test did not exercise recovery"
        assert ordinary[-1].outcome != "overflow"
        for received in ordinary:
            check_invariants(received.body["messages"])
            assert received.problems == []
    assert len(loop.responses) == len(loop.full_tokens)  # every request got an answer


@pytest.mark.parametrize("dialect", ["openai", "vllm", "llamacpp", "anthropic"])
def test_overflow_errors_sent_inside_a_stream_are_recovered(db_path: str, dialect: str) -> None:
    """The provider answers 200 and puts its overflow error in the stream: ctxgate reads the
    first event before answering, so it still compresses and retries; the client sees none."""
    spec = ModelSpec(window=WINDOW, dialect=dialect, stream_errors="event")
    with Simulator(models={MODEL: spec}, validate_messages=True) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=4 * WINDOW)) as proxy:
            loop = AgentLoop(client_for(proxy), MODEL, session_id=f"in-band-{dialect}", stream=True)
            loop.script(sim)
            grow(loop, 4 * WINDOW)
        ordinary = [r for r in sim.chat_requests if not r.is_summary]
        overflows = [r for r in ordinary if r.outcome == "overflow"]
        assert overflows, "the provider never refused: the test did not exercise recovery"
        assert all(r.status == 200 for r in overflows)  # in the stream, not as a status
        assert ordinary[-1].outcome != "overflow"
        for received in ordinary:
            check_invariants(received.body["messages"])
    # Every request was answered by a complete stream (a relayed error would have raised).
    assert len(loop.compressed_headers) == len(loop.full_tokens)
    assert "true" in loop.compressed_headers


def test_an_unrecoverable_overflow_inside_a_stream_becomes_an_error_status(db_path: str) -> None:
    spec = ModelSpec(window=WINDOW, stream_errors="event")
    with Simulator(models={MODEL: spec}) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=4 * WINDOW)) as proxy:
            with pytest.raises(openai.BadRequestError) as caught:
                stream = client_for(proxy).chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "word " * 12000}],
                    stream=True,
                )
                list(stream)
    assert caught.value.code == "context_length_exceeded"
    assert "ctxgate" in str(caught.value)


def test_prompt_plus_max_tokens_is_fixed_by_lowering_max_tokens(db_path: str) -> None:
    with Simulator(models={MODEL: ModelSpec(window=WINDOW, dialect="vllm")}) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=4 * WINDOW)) as proxy:
            messages = [{"role": "user", "content": "word " * 3000}]
            answer = client_for(proxy).chat.completions.create(
                model=MODEL, messages=messages, max_tokens=6000
            )  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    first, second = sim.chat_requests
    assert first.outcome == "overflow"
    assert second.body["messages"] == first.body["messages"]
    assert second.body["max_tokens"] < 6000
    assert second.prompt_tokens + second.body["max_tokens"] <= WINDOW


def test_unrecoverable_overflow_returns_the_upstream_error_with_a_reason(db_path: str) -> None:
    """One user message larger than the window: nothing to summarize, nothing to drop."""
    with Simulator(models={MODEL: ModelSpec(window=WINDOW)}) as sim:
        with ProxyServer(small_model_settings(sim, db_path, context_length=4 * WINDOW)) as proxy:
            with pytest.raises(openai.BadRequestError) as caught:
                client_for(proxy).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "word " * 12000}]
                )
    assert caught.value.code == "context_length_exceeded"
    assert "ctxgate" in str(caught.value)
