"""The working set: what a conversation works on, ranked, for any agent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.messages.types import Message
from compression.summary.handoff import Handoff, parse_handoff, render_handoff, render_working
from compression.verbatim.workingset import (
    CORE_TIERS,
    EDITED,
    NEWEST,
    REASONS,
    REQUESTED,
    REREAD,
    SEEN,
    same_file,
    working_set,
)
from tests.compression.builders import CORPUS, corpus_conversations


def call(name: str, arguments: dict[str, Any], output: str, n: int) -> list[Message]:
    ask: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return [ask, {"role": "tool", "tool_call_id": f"c{n}", "content": output}]


def session(*turns: tuple[str, dict[str, Any], str]) -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the rounding in src/shop/billing.py, please."},
    ]
    for n, (name, arguments, output) in enumerate(turns):
        messages += call(name, arguments, output, n)
    return messages


READ_BILLING = ("Read", {"file_path": "/repo/src/shop/billing.py"}, "def total(): ...")


def test_the_file_the_user_names_ranks_first_under_the_tools_path() -> None:
    found = working_set(
        session(
            READ_BILLING,
            ("Read", {"file_path": "/repo/src/shop/tax.py"}, "def rate(): ..."),
            ("Edit", {"file_path": "/repo/src/shop/tax.py"}, "ok"),
            ("Read", {"file_path": "/repo/src/shop/orders.py"}, "def order(): ..."),
            ("Read", {"file_path": "/repo/src/shop/orders.py"}, "def order(): ... v2"),
            ("Read", {"file_path": "/repo/src/shop/misc.py"}, "HELP_TEXT = 1"),
        )
    )
    files = [(e.name, e.tier) for e in found.entities if e.kind == "file"]
    assert files[:4] == [
        ("/repo/src/shop/billing.py", REQUESTED),
        ("/repo/src/shop/tax.py", EDITED),
        ("/repo/src/shop/orders.py", REREAD),
        ("/repo/src/shop/misc.py", NEWEST),
    ]
    assert found.core("/repo/src/shop/billing.py") and found.core("src/shop/billing.py")
    assert not found.core("/repo/src/shop/misc.py")


def test_what_the_newest_turn_names_outranks_older_mentions() -> None:
    found = working_set(
        session(
            ("Bash", {"command": "grep -r ERR_LIMIT_7"}, "conf/app.yaml: ERR_LIMIT_7"),
            ("Bash", {"command": "pytest"}, "E   KeyError: order_id_4471"),
        )
    )
    tiers = {e.name: e.tier for e in found.entities}
    assert tiers["KeyError"] == NEWEST and tiers["order_id_4471"] == NEWEST
    assert tiers["ERR_LIMIT_7"] == SEEN


def test_the_handoff_carries_the_working_set_across_a_compression() -> None:
    before = working_set(session(READ_BILLING, ("Edit", {"file_path": "/repo/src/t.py"}, "ok")))
    handoff = Handoff(body="Work so far.", working=before.carried())
    parsed = parse_handoff(render_handoff(handoff))
    assert parsed is not None and parsed.handoff.working == before.carried()
    after = working_set(
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": render_handoff(handoff)},
            *call("Bash", {"command": "ls"}, "README.md", 9),
        ]
    )
    assert after.tier("/repo/src/t.py") == EDITED  # the edit itself was summarized
    assert after.tier("/repo/src/shop/billing.py") == REQUESTED


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("src/a.py", "/repo/src/a.py", True),
        ("a.py", "src/a.py", True),
        ("/x/src/a.py", "/y/src/a.py", False),
        ("src/a.py", "src/b/a.py", False),
        ("ba.py", "src/a.py", False),
    ],
)
def test_one_file_named_two_ways(a: str, b: str, same: bool) -> None:
    assert same_file(a, b) is same and same_file(b, a) is same


# --- properties ----------------------------------------------------------------------------

PATHS = st.sampled_from(["a.py", "src/a.py", "/r/src/a.py", "b/c.ts", "/r/b/c.ts", "d.md"])
WORDS = st.sampled_from(["fix", "KeyError", "ID-4471x", "see", "http://x.io/a", "MAX_RETRY"])


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = [{"role": "system", "content": "agent"}]
    for n in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["user", "read", "edit", "shell"]))
        path = draw(PATHS)
        text = " ".join(draw(st.lists(st.one_of(WORDS, PATHS), max_size=5)))
        if kind == "user":
            out.append({"role": "user", "content": text})
        elif kind == "read":
            out += call("Read", {"file_path": path}, text or "x", n)
        elif kind == "edit":
            out += call("Edit", {"file_path": path, "old_string": "a"}, "ok", n)
        else:
            out += call("Bash", {"command": f"cat {path} | wc"}, text or "1", n)
    return out


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_ranked_by_tier_then_newest(history: list[Message]) -> None:
    found = working_set(history)
    keys = [(e.tier, -e.last) for e in found.entities]
    assert keys == sorted(keys)
    assert len({e.name for e in found.entities}) == len(found.entities)
    for entity in found.entities:
        assert 0 <= entity.last < len(history)
        assert entity.reasons and entity.tier == min(
            ("named by the user", "edited", "re-read", "in the newest turn", "seen").index(r)
            for r in entity.reasons
        )


@settings(max_examples=200, deadline=None)
@given(conversations(), PATHS)
def test_a_file_the_user_names_becomes_requested(history: list[Message], path: str) -> None:
    found = working_set([*history, {"role": "user", "content": f"now look at {path}"}])
    assert found.tier(path) == REQUESTED and found.core(path)


@settings(max_examples=200, deadline=None)
@given(conversations(), PATHS)
def test_an_edited_file_is_core(history: list[Message], path: str) -> None:
    history = history + call("Edit", {"file_path": path}, "ok", 99)
    assert working_set(history).tier(path) in CORE_TIERS


# --- the recorded transcripts --------------------------------------------------------------

# (conversation, the file the working set puts first, its tier), read from the transcripts:
# the issue text names the file it wants fixed, or the agent edits or re-reads it.
REAL_TURNS = {
    "mini::tests/test_data/github_issue.traj.json": (
        "tests/missing_colon.py",
        REQUESTED,  # the issue names it by its absolute path; the agent cats it relative
    ),
    "sweagent::trajectories/demonstrations/function_calling_simple.traj": (
        "tests/missing_colon.py",
        REQUESTED,
    ),
    "sweagent::trajectories/demonstrations/ctf/crypto/BabyEncryption.traj": (
        "chall.py",
        REQUESTED,
    ),
    "sweagent::trajectories/demonstrations/replay__marshmallow-code__marshmallow-1867__"
    "function_calling__install-1/marshmallow-code__marshmallow-1867.traj": (
        "src/marshmallow/fields.py",
        EDITED,
    ),
    "opencode-1.18.33-sim": ("compression/planning.py", REREAD),
}


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not present")
@pytest.mark.parametrize("name", sorted(REAL_TURNS))
def test_real_agents_turns(name: str) -> None:
    history = dict(corpus_conversations())[name]
    files = [e for e in working_set(history).entities if e.kind == "file"]
    assert (files[0].name, files[0].tier) == REAL_TURNS[name]


NAME = st.from_regex(r"[A-Za-z0-9_./:-]{1,30}", fullmatch=True)
WHY = st.lists(st.sampled_from(REASONS), min_size=1, max_size=3, unique=True).map(tuple)


@given(st.lists(st.tuples(NAME, WHY), max_size=12))
def test_any_working_set_round_trips_through_its_grouped_lines(
    working: list[tuple[str, tuple[str, ...]]],
) -> None:
    parsed = parse_handoff(render_handoff(Handoff(body="Work so far.", working=tuple(working))))
    assert parsed is not None and parsed.handoff.working == tuple(working)


def test_entities_with_the_same_reasons_share_one_line_and_seen_is_not_written() -> None:
    before = working_set(
        [
            {"role": "system", "content": "You are an airline agent."},
            {"role": "user", "content": "Cancel XEWRD9 and NQNU5R for user mia_li_3668."},
        ]
    )
    carried = before.carried()
    assert {why for _, why in carried} == {("named by the user", "in the newest turn")}
    text = render_working(carried)
    assert text.count("\n") == 0 and text.startswith("- named by the user, in the newest turn: ")
    legacy = parse_handoff(
        render_handoff(Handoff(body="x", working=(("b.py", ("edited",)),))).replace(
            "- edited: b.py", "- a.py (edited, seen)"
        )
    )
    assert legacy is not None
    assert legacy.handoff.working == (("a.py", ("edited", "seen")),)  # how handoffs wrote it


def test_a_config_key_the_user_or_the_agent_names_is_in_the_set_not_one_a_tool_printed() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Open the vault with the VAULT_CODE."},
        {"role": "assistant", "content": "I will read DATABASE_URL first."},
        {"role": "tool", "tool_call_id": "c1", "content": "HOME_DIR: /root\nVAULT_CODE: x"},
    ]
    working = working_set(messages)
    assert working.tier("VAULT_CODE") == REQUESTED
    assert working.tier("DATABASE_URL") < SEEN + 1
    assert working.find("HOME_DIR") is None
