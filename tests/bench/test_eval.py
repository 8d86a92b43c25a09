"""The quick compression-quality evaluation (bench/eval.py --quick), run in process.

Three corpus sessions of >= 5 windows (8K) are replayed through a real ctxgate with background
compression on and off. Hard gates: no overflow reaches the client, every forwarded request is
structurally valid, ctxgate bills fewer prompt tokens than sending the full history, the newest
user message is forwarded verbatim on every turn, the user's earlier words survive as far as
the budget allows (floors measured, not aspirations), nothing compressed is unrecoverable, and
planted facts are answered through ctxgate's recall tool.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.eval import config_from, parse_args, run
from bench.evaluation.corpus import CorpusMissing, build_sessions, find_corpus
from bench.evaluation.needles import plant
from bench.evaluation.replay import replay
from bench.evaluation.runner import ARMS, REPO, EvalResults, SessionResult
from bench.evaluation.shadow import shadow_pooled

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


# Measured on the quick sessions (8K windows, where a third of the window is the system prompt
# and tool schemas): 4-10 % of the user messages stay verbatim per arm, the task statement
# survives at least clipped in every session, 4 of 9 planted user facts survive. Before the
# carry learned to skip tool observations and keep the opening request and anchors: 5 %, the
# task statement lost in both SWE-agent sessions, 1 of 9 facts. Since the newest read of the
# file an agent edits claims its share first (compression/verbatim/reads.py), the SWE-agent sessions
# keep every read their edits need (a gate below) and 2 of 9 planted user facts at 8K: at
# this window one ~1,000-token file read and the user's words cannot both stay (the full
# evaluation's 16K-128K windows keep as many user facts as before).
MIN_USER_SHARE = 0.04
MIN_USER_NEEDLES = 2


def test_user_messages_survive_as_far_as_the_budget_allows(
    quick: tuple[EvalResults, Path],
) -> None:
    results, _ = quick
    for name in {name for s in results.sessions for name in s.arms}:
        arms = [s.arms[name] for s in results.sessions if name in s.arms]
        kept = sum(a.retention.user[0] for a in arms)
        total = sum(a.retention.user[1] for a in arms)
        assert kept >= MIN_USER_SHARE * total, f"{name}: {kept}/{total} user messages"
        needles = [v for a in arms for k, v in a.retention.needles.items() if k.startswith("user")]
        assert sum(needles) >= MIN_USER_NEEDLES, f"{name}: {sum(needles)}/{len(needles)} facts"


MAX_OBSERVATIONS_CARRIED = 1


def test_the_task_statement_survives_and_no_tool_output_poses_as_the_user(
    quick: tuple[EvalResults, Path],
) -> None:
    results, _ = quick
    for session, name in _arms(results):
        retention = session.arms[name].retention
        assert retention.original_head, f"{session.name}/{name}: the task statement is lost"
        # A measured floor: with every user message now carried while it fits, one SWE-agent
        # observation that reads as prose (compression/verbatim/observations.py judges by shape) is
        # taken for the user's words in swe-text-8k-0; none was before, when few were carried.
        assert retention.observations_carried <= MAX_OBSERVATIONS_CARRIED, f"{session.name}/{name}"


def test_identifiers_followed_by_punctuation_are_found_in_the_archive(
    quick: tuple[EvalResults, Path],
) -> None:
    """Ids, paths and error names the archive holds, searched as a model writes them (`ID:`,
    `path.`): the archive index finds every one."""
    results, _ = quick
    for session, name in _arms(results):
        hits, searches = session.arms[name].search_hits
        assert searches >= 20, f"{session.name}/{name}: too few identifiers to tell"
        assert hits == searches, f"{session.name}/{name}: {session.arms[name].search_missed}"


def test_the_file_an_edit_depends_on_is_in_view(quick: tuple[EvalResults, Path]) -> None:
    """Each edit of the coding sessions, in the request the model answered with it: the
    newest read of the edited file is there verbatim in most of them. At 8K the files'
    share holds the working set's files (named by the user, edited, re-read) first, so a
    file read once just before its edit may yield to them; the full mark is judged at 16K and
    up (bench/eval.py's windows)."""
    results, _ = quick
    coding = [(s, n) for s, n in _arms(results) if s.arms[n].edits]
    assert coding
    for session, name in coding:
        kept, counted = session.arms[name].edit_reads
        assert counted and kept * 3 >= counted * 2, f"{session.name}/{name}: {kept}/{counted}"


def test_results_are_written(quick: tuple[EvalResults, Path]) -> None:
    _, out = quick
    data = json.loads((out / "eval.json").read_text())
    assert {s["name"] for s in data["sessions"]} == {"tau-8k-0", "swe-text-8k-0", "swe-fc-8k-0"}
    table = (out / "eval.md").read_text()
    assert "| tau-8k-0 |" in table
    assert (out / "eval.png").stat().st_size > 10_000


def test_every_removed_message_is_archived_and_recoverable(
    quick: tuple[EvalResults, Path],
) -> None:
    """What compressions removed from the final view is in ctxgate's archive (read over the
    admin API) and named by a handle in the view: nothing is lost."""
    results, _ = quick
    for session, name in _arms(results):
        kept = session.arms[name].recoverable
        assert kept.messages > 100, f"{session.name}/{name}: too few messages to test"
        assert kept.verbatim < kept.messages / 2, f"{session.name}/{name}: too little compressed"
        assert kept.lost == [], f"{session.name}/{name}: lost positions {kept.lost[:10]}"
        assert kept.recoverable == (kept.messages, kept.messages), f"{session.name}/{name}"


MIN_FACTS_ANSWERED = 0.95


def test_planted_facts_are_answered_from_view_or_through_the_recall_tool(
    quick: tuple[EvalResults, Path],
) -> None:
    """After the last turn the client asks about every planted fact (every other question
    streamed). Recall before asking puts most of them back in view before the question
    reaches the model; a fact still out of view is answered after ctxgate served the recall
    model's `ctxgate_recall` calls from its archive; the client never sees such a call. (The
    recall tool's own path, streamed and not, is tests/session/test_recall.py's.)"""
    results, _ = quick
    probes = [p for s in results.sessions for a in s.arms.values() for p in a.probes]
    assert len(probes) >= 20
    assert all(p.error is None for p in probes), [p.error for p in probes if p.error][:3]
    assert all(p.offered for p in probes)
    assert not any(p.client_tool_call for p in probes), "a recall call reached the client"
    correct = sum(p.correct for p in probes)
    assert correct >= MIN_FACTS_ANSWERED * len(probes), f"{correct}/{len(probes)} facts"
    recalled = [p for p in probes if not p.in_view and p.correct]
    assert all(p.recall_calls > 0 for p in recalled)
    assert sum(p.in_view for p in probes) >= len(probes) // 2, "recall before asking idle"


def test_no_recall_round_overflows_beside_large_tool_schemas() -> None:
    """The recorded OpenCode/aider session at 8K, where OpenCode's prompt and tools take 7.2K
    tokens: recall is offered only while the window has room for a round, so no round
    overflows and every question gets an answer (with no room, one from what is in view)."""
    try:
        session = build_sessions(find_corpus(REPO), ["agents"], 8192, 5.0)[0]
    except CorpusMissing as exc:
        pytest.skip(f"shared corpus not found: {exc}")
    plant(session)
    run = replay(session, options=ARMS["main"].options(8192), measure_direct=False)
    assert len(run.probes) == 6
    assert all(p.error is None and not p.client_tool_call for p in run.probes)
    assert all(p.answer.strip() for p in run.probes), [p.answer for p in run.probes]
    assert all(p.correct for p in run.probes if p.recall_calls), [p.answer for p in run.probes]


def test_shadow_agreement_is_measured_with_its_noise_floor(
    quick: tuple[EvalResults, Path],
) -> None:
    """Each session replayed with shadow checks on every compressed request, answered by the
    in-view model: checks happen, the deterministic model agrees with itself on every one (its
    noise floor is 100%), and the table and eval.json carry both variants."""
    results, out = quick
    pooled = {p["variant"]: p for p in shadow_pooled(results.sessions)}
    assert set(pooled) == {"deterministic", "sampled"}
    deterministic = pooled["deterministic"]
    assert deterministic["checks"] > 0
    assert deterministic["noise_floor"] == 1.0
    assert all(r.needs for s in results.sessions for r in s.shadow), "no fact to need"
    data = json.loads((out / "eval.json").read_text())
    assert [p["variant"] for p in data["shadow"]] == ["deterministic", "sampled"]
    assert "### Shadow agreement (per window)" in (out / "eval.md").read_text()
