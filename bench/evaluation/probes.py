"""Factory-style probes with a real model (optional): after compression vs full context.

A short airline session is replayed through ctxgate; ordinary turns go to the simulator (their
answers are discarded anyway) while the handoff summaries are written by the real model
(`compression.summary.upstream`). Then each probe question is appended to the history and sent
(a) through ctxgate, whose forwarded view is captured and given to the real model, (b) as the
full history, (c) as the observation-masked history. Answers are scored by string match
against mechanical ground truth (planted codes, record ids), so no judge model is needed.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.evaluation.baselines import masked_view
from bench.evaluation.corpus import Message, Session, build_sessions, find_corpus
from bench.evaluation.replay import CLIENT_KEY, MODEL, simulator_for, stored_events
from tests.servers import ProxyServer, settings_for

PROBE_WINDOW = 2048  # what ctxgate is told the model's window is
SERVER_CTX = 8192  # a server started here holds the full history too (SmolLM2 is trained to 8K)
SIZE_FACTOR = 3.0
SYSTEM = (
    "You are an airline customer-service agent. Help each customer with their reservation. "
    "Answer questions about this conversation briefly and exactly."
)
USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")
RESERVATION = re.compile(r"\b(?!HAT\d{3}\b)(?=[A-Z0-9]{6}\b)(?=\w*\d)(?=\w*[A-Z])[A-Z0-9]{6}\b")


QUESTIONS = {
    "hint": "What is the deploy password hint I gave you earlier? Reply with the hint only.",
    "door": "What is the backup door code shown in a tool result? Reply with the code only.",
    "first": "What was the user ID of the first customer today? Reply with the ID only.",
    "latest": "What is the most recent reservation ID mentioned here? Reply with the ID only.",
}


@dataclass(frozen=True)
class Probe:
    kind: str
    question: str
    answer: str


def _plant(session: Session, index: int, sentence: str) -> None:
    message = session.messages[index]
    message["content"] = f"{message['content']}\n\n{sentence}"
    session.forget_tokens()


def _probes(session: Session) -> list[Probe]:
    """Plant two needles at ~30% depth and derive the ground truth of every probe."""
    end = session.points()[-1]
    users = [i for i in session.stated if 1 < i < end]
    tools = [i for i in session.observations if i < end]
    user_index, tool_index = users[len(users) * 3 // 10], tools[len(tools) * 3 // 10]
    _plant(session, user_index, "The deploy password hint is NEEDLE-7f3a9c.")
    _plant(session, tool_index, "Note: the backup door code is NEEDLE-b41e22.")
    history = "\n".join(str(m.get("content") or "") for m in session.messages[:end])
    first_user = USER_ID.findall(history)[0]
    last_reservation = RESERVATION.findall(history)[-1]
    return [
        Probe("needle in user message", QUESTIONS["hint"], "NEEDLE-7f3a9c"),
        Probe("needle in tool output", QUESTIONS["door"], "NEEDLE-b41e22"),
        Probe("first customer's user id", QUESTIONS["first"], first_user),
        Probe("latest reservation id", QUESTIONS["latest"], last_reservation),
    ]


def _session(config: Any) -> Session:
    corpus = config.corpus or find_corpus(Path(__file__).resolve().parents[2])
    session = build_sessions(corpus, ["tau"], PROBE_WINDOW, SIZE_FACTOR)[0]
    session.messages[0] = {"role": "system", "content": SYSTEM}  # the 1.8K policy fills 2K alone
    session.tools = None
    session.forget_tokens()
    return session


def _for_llama(messages: list[Message]) -> list[Message]:
    """llama-cpp-python's server answers 500 to `content: null`."""
    return [{**m, "content": m.get("content") or ""} for m in messages]


@contextmanager
def _server(url: str) -> Iterator[str]:
    if url != "auto":
        yield url.rstrip("/")
        return
    from tests.llamacpp_server import LlamaCppServer

    with LlamaCppServer(n_ctx=SERVER_CTX) as server:
        yield server.base_url


def _model_name(base_url: str) -> str:
    listing = httpx.get(f"{base_url}/models", timeout=30).json()
    return str(listing["data"][0]["id"])


def _ask_model(
    llama: openai.OpenAI, model: str, messages: list[Message]
) -> tuple[str, int | None, str | None]:
    try:
        answer = llama.chat.completions.create(
            model=model,
            messages=_for_llama(messages),
            max_tokens=32,
            temperature=0,  # type: ignore[arg-type]
        )
    except openai.APIError as exc:
        return "", None, f"{type(exc).__name__}: {str(exc)[:200]}"
    usage = answer.usage.prompt_tokens if answer.usage else None
    return answer.choices[0].message.content or "", usage, None


def _compressed_views(
    session: Session, base_url: str, model: str, questions: list[str]
) -> tuple[list[list[Message] | None], dict[str, int]]:
    """Replay through ctxgate (real-model summaries), then capture its view for each probe."""
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxgate-probe-")))
        sim = stack.enter_context(simulator_for(PROBE_WINDOW, "fit"))
        settings = settings_for(
            sim.base_url,
            str(folder / "ctxgate.db"),
            models=[{"match": "*", "upstream": "sim", "context_length": PROBE_WINDOW}],
            upstreams={
                "sim": {"base_url": sim.base_url, "api_key": "sk-upstream-test", "timeout_s": 30},
                "llama": {"base_url": base_url, "timeout_s": 900},
            },
            compression={
                "background": False,  # summaries finish before the next turn
                "options": {"min_threshold_tokens": PROBE_WINDOW // 2},
                "summary": {"upstream": "llama", "model": model, "timeout_s": 900},
            },
        )
        proxy = stack.enter_context(ProxyServer(settings))
        client = openai.OpenAI(
            base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=1800
        )
        session_id = f"probe-{uuid.uuid4().hex[:8]}"
        headers = {"X-Session-Id": session_id}
        for end in session.points():
            _send(client, session.messages[:end], headers)
        end = session.points()[-1]
        views: list[list[Message] | None] = []
        for question in questions:
            before = len(sim.received)
            _send(client, [*session.messages[:end], {"role": "user", "content": question}], headers)
            sent = [
                r
                for r in sim.received[before:]
                if r.is_chat and not r.is_summary and r.status == 200
            ]
            views.append(sent[-1].messages if sent else None)
        stored = stored_events(proxy, session_id)
    events = Counter(f"{trigger}/{outcome}" for trigger, outcome, _ in stored)
    reasons = Counter(error[:160] for _, _, error in stored if error)
    return views, {**events, **{f"error: {k}": v for k, v in reasons.items()}}


def _send(client: openai.OpenAI, messages: list[Message], headers: dict[str, str]) -> None:
    try:
        client.chat.completions.create(model=MODEL, messages=messages, extra_headers=headers)  # type: ignore[arg-type]
    except openai.APIError:
        pass  # a turn ctxgate could not serve shows up as a missing view below


def run_probes(url: str, config: Any) -> dict[str, Any]:
    """Probe results per context (ctxgate, full, masking); a skip note when no model."""
    if url == "auto":
        from tests.llamacpp_server import missing_reason

        reason = missing_reason()
        if reason is not None:
            return {"skipped": reason}
    session = _session(config)
    probes = _probes(session)
    end = session.points()[-1]
    with _server(url) as base_url:
        model = _model_name(base_url)
        llama = openai.OpenAI(base_url=base_url, api_key="sk-none", max_retries=0, timeout=1800)
        views, events = _compressed_views(session, base_url, model, [p.question for p in probes])
        contexts: dict[str, list[list[Message] | None]] = {
            "ctxgate": views,
            "full history": [session.messages[:end]] * len(probes),
            "masking M=10": [masked_view(session, end)] * len(probes),
        }
        rows = [_score(name, llama, model, probes, items) for name, items in contexts.items()]
    return {
        "model": model,
        "window": PROBE_WINDOW,
        "session_tokens": session.total_tokens(),
        "contexts": rows,
        "compressions": events,
        "note": (
            f"Model {model}; ctxgate told the window is {PROBE_WINDOW}; session of "
            f"{session.total_tokens():,} tokens; compressions (summaries by the real model) "
            f"{events}; probes: {', '.join(p.kind for p in probes)}."
        ),
    }


def _score(
    name: str,
    llama: openai.OpenAI,
    model: str,
    probes: list[Probe],
    views: list[list[Message] | None],
) -> dict[str, Any]:
    answers, tokens, errors, correct = [], [], 0, 0
    for probe, view in zip(probes, views, strict=True):
        if view is None:
            errors += 1
            answers.append({"probe": probe.kind, "error": "ctxgate forwarded nothing"})
            continue
        if view[-1].get("content") != probe.question:
            view = [*view, {"role": "user", "content": probe.question}]
        text, used, error = _ask_model(llama, model, view)
        errors += error is not None
        hit = probe.answer.lower() in text.lower()
        correct += hit
        tokens += [used] if used else []
        answers.append(
            {
                "probe": probe.kind,
                "expected": probe.answer,
                "answer": text,
                "correct": hit,
                "error": error,
            }
        )
    mean = round(sum(tokens) / len(tokens)) if tokens else None
    return {
        "context": name,
        "n": len(probes),
        "correct": correct,
        "prompt_tokens": mean,
        "errors": errors,
        "answers": answers,
    }
