"""The quick compression-quality evaluation (bench/eval.py --quick), run in process.

Three corpus sessions of >= 5 windows (8K) are replayed through a real ctxgate with background
compression on and off. Hard gates: no overflow reaches the client, every forwarded request is
structurally valid, ctxgate bills fewer prompt tokens than sending the full history, and the
newest user message is forwarded verbatim on every turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.eval import config_from, parse_args, run
from bench.evaluation.corpus import CorpusMissing
from bench.evaluation.runner import EvalResults, SessionResult

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EvalResults, Path]]:
    out = tmp_path_factory.mktemp("eval")
    config = config_from(parse_args(["--quick", "--no-progress"]))
    try:
        results = run(config, out)
    except CorpusMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the shared corpus is missing in CI: {exc}")
        pytest.skip(f"shared corpus not found: {exc}")
    yield results, out


def _arms(results: EvalResults) -> list[tuple[SessionResult, str]]:
    return [(s, name) for s in results.sessions for name in s.arms]


def test_no_overflow_reaches_the_client(quick: tuple[EvalResults, Path]) -> None:
    results, _ = quick
    assert len(results.sessions) == 3
    for session, name in _arms(results):
        arm = session.arms[name]
        assert arm.client_overflows == 0, f"{session.name}/{name}: {arm.errors}"
        assert arm.client_errors == 0, f"{session.name}/{name}: {arm.errors}"


def test_every_forwarded_request_is_valid(quick: tuple[EvalResults, Path]) -> None:
    results, _ = quick
    for session, name in _arms(results):
        arm = session.arms[name]
        assert arm.forwarded >= arm.turns
        assert arm.invalid == 0, f"{session.name}/{name}: {arm.invalid} invalid requests"


def test_billed_tokens_are_below_the_full_history(quick: tuple[EvalResults, Path]) -> None:
    results, _ = quick
    for session, name in _arms(results):
        assert session.tokens >= 5 * session.window, "the session is too short to test anything"
        assert session.arms[name].billed < session.full.total, f"{session.name}/{name}"
        assert sum(session.arms[name].compressions.values()) > 0


def test_newest_user_message_is_forwarded_verbatim(quick: tuple[EvalResults, Path]) -> None:
    results, _ = quick
    for session, name in _arms(results):
        kept, total = session.arms[name].newest_user
        assert total > 0 and kept == total, f"{session.name}/{name}: {kept}/{total} turns"


@pytest.mark.xfail(
    reason="ctxgate carries user messages verbatim only within a token budget (SPEC 5.5, "
    "'newest first, bounded'): at 8K most earlier user turns are summarized, not kept",
)
def test_every_user_message_survives_in_the_final_view(quick: tuple[EvalResults, Path]) -> None:
    results, _ = quick
    for session, name in _arms(results):
        kept, total = session.arms[name].retention.user
        assert kept == total, f"{session.name}/{name}: {kept}/{total} user messages"


def test_results_are_written(quick: tuple[EvalResults, Path]) -> None:
    _, out = quick
    data = json.loads((out / "eval.json").read_text())
    assert {s["name"] for s in data["sessions"]} == {"tau-8k-0", "swe-text-8k-0", "swe-fc-8k-0"}
    table = (out / "eval.md").read_text()
    assert "| tau-8k-0 |" in table
    assert (out / "eval.png").stat().st_size > 10_000
