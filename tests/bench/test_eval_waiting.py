"""The eval's turns wait for the session's background compression (bench/evaluation/waiting.py):
with a summary model that takes its time, every background compression lands before the next
turn, which is sent on the view it left; without the wait, turns overtake it."""

from __future__ import annotations

from typing import Any

import pytest

from bench.eval import config_from, parse_args
from bench.evaluation.corpus import CorpusMissing, Session, build_sessions, find_corpus
from bench.evaluation.replay import Replay, _fit_summary, replay
from bench.evaluation.runner import ARMS, REPO
from tests.simulator import Hang, Reply, is_summary_request

pytestmark = pytest.mark.slow

WINDOW = 16384
SLOW_S = 0.25  # the summary model's answer time: far longer than a replayed turn


def slow_summaries(body: dict[str, Any]) -> Reply | Hang:
    if is_summary_request(body):
        return Hang(seconds=SLOW_S, then=_fit_summary(body))
    return Reply(content="ok")


@pytest.fixture(scope="module")
def session() -> Session:
    try:
        return build_sessions(find_corpus(REPO), ["tau"], WINDOW, 2.0)[0]
    except CorpusMissing as exc:
        pytest.skip(f"shared corpus not found: {exc}")


def run(session: Session, await_compression: bool) -> Replay:
    return replay(
        session,
        options=ARMS["main"].options(WINDOW),
        measure_direct=False,
        probe=False,
        responder=slow_summaries,
        await_compression=await_compression,
    )


def checkpoints(run: Replay) -> list[str | None]:
    return [t.headers.get("x-ctxgate-checkpoint") for t in run.turns]


def test_each_turn_waits_for_the_compression_a_slow_summary_keeps_running(
    session: Session,
) -> None:
    awaited = run(session, await_compression=True)
    landed = awaited.events.count(("post_response", "compressed"))
    assert landed >= 2, awaited.events
    assert all(t.error is None for t in awaited.turns)
    waits = awaited.waits
    assert len(waits) == len(awaited.turns) - 1  # before every turn but the first
    assert not any(w.timed_out for w in waits)
    running = [i for i, t in enumerate(awaited.turns) if t.wait is not None and t.wait.waited]
    assert len(running) >= landed
    waited_s = sum(w.seconds for w in waits if w.waited)
    assert waited_s >= landed * SLOW_S * 0.9  # each compression's summary, waited out
    # The turn after each wait is sent on the checkpoint the compression committed.
    ids = checkpoints(awaited)
    moved = [i for i in running if ids[i + 1] != ids[i]]
    assert len(moved) >= landed, (running, ids)

    # Without the wait the next turns go out while the summary model is still answering:
    # fewer compressions land, and those that do are seen turns later.
    raced = run(session, await_compression=False)
    assert raced.waits == []
    assert raced.events.count(("post_response", "compressed")) < landed


def test_the_eval_awaits_compression_by_default() -> None:
    assert config_from(parse_args(["--quick"])).await_compression
    assert not config_from(parse_args(["--quick", "--no-await-compression"])).await_compression
