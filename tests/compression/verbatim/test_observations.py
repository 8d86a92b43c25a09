from __future__ import annotations

from collections import Counter

import pytest

from compression.messages.toolpairs import pair_tool_calls
from compression.messages.types import Message
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, render_handoff
from compression.summary.records import render_records
from compression.verbatim.observations import is_observation, observation_indices, prose_share
from tests.compression.builders import (
    CORPUS,
    call,
    calls,
    corpus_conversations,
    reply,
    result,
    system,
    user,
)

ACTION = "I will run the tests.\n```bash\npytest -q\n```"
SWE_AGENT_TRAILER = "\n\n(Open file: /repo/app.py)\n(Current directory: /repo)\nbash-$"


def after_action(text: str, action: str = ACTION) -> list[Message]:
    return [system(), user("Fix the bug."), reply(action), user(text)]


@pytest.mark.parametrize(
    "text",
    [
        "<returncode>0</returncode>\n<output>\nhello world\n</output>",
        "OBSERVATION:\nFound 3 files.",
        "[File: /repo/app.py (10 lines total)]\n1:import os\n2:\n3:def main():",
    ],
)
def test_explicit_output_markers_make_an_observation(text: str) -> None:
    messages = after_action(text, action="Let me see.")  # even without an action block
    assert is_observation(messages, 3)


def test_output_shaped_text_after_an_action_block_is_an_observation() -> None:
    listing = "\n".join(f"{n}:    value_{n} = compute({n})" for n in range(1, 30))
    assert is_observation(after_action(listing + SWE_AGENT_TRAILER), 3)
    found = 'Found 2 matches for "app.py" in /repo:\n/repo/app.py\n/repo/tests/app.py'
    assert is_observation(after_action(found + SWE_AGENT_TRAILER), 3)


def test_prose_after_an_action_block_stays_a_user_message() -> None:
    task = (
        "We're currently solving the following issue within our repository. Here's the issue "
        "text:\nThe parser crashes when the input file is empty, and it should instead return "
        "an empty document without raising.\nNow, you're going to solve this issue on your own. "
        "Remember to run the tests before you submit your change." + SWE_AGENT_TRAILER
    )
    assert not is_observation(after_action(task), 3)
    assert not is_observation(after_action("No, please do not run the whole suite."), 3)


def test_only_a_user_message_right_after_a_plain_assistant_turn_can_be_one() -> None:
    output = "<returncode>1</returncode>\n<output>\nboom\n</output>"
    assert not is_observation([system(), user(output)], 1)  # nothing answered yet
    assert not is_observation([user(output)], 0)
    after_tools: list[Message] = [
        system(),
        user("go"),
        calls(call("c1")),
        result("c1", "ok"),
        user(output),
    ]
    assert not is_observation(after_tools, 4)
    assert not is_observation([system(), user("a"), user(output)], 2)
    assert not is_observation(after_action(""), 3)


def test_prose_share_tells_sentences_from_output() -> None:
    assert prose_share("The build failed because the cache directory was not writable.") == 1.0
    assert prose_share("1:import os\n2:import sys\n3:print(sys.argv)") == 0.0
    assert prose_share("") == 1.0


def test_indices_cover_only_the_region() -> None:
    messages = after_action("<returncode>0</returncode>") + [
        reply(ACTION),
        user("<returncode>2</returncode>"),
    ]
    assert observation_indices(messages, 0, len(messages)) == {3, 5}
    assert observation_indices(messages, 4, len(messages)) == {5}


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not present")
def test_corpus_customers_are_users_and_text_agent_outputs_are_observations() -> None:
    counts: Counter[tuple[str, str, bool]] = Counter()
    for name, messages in corpus_conversations():
        source = "tau" if name.startswith("tau") else name.split("::")[0]
        replied = False
        for index, message in enumerate(messages):
            replied = replied or message["role"] == "assistant"
            if message["role"] == "user":
                place = "later" if replied else "opening"
                counts[(source, place, is_observation(messages, index))] += 1
    # a customer is never mistaken for tool output, nor is an agent's task statement
    assert counts[("tau", "later", True)] == counts[("tau", "opening", True)] == 0
    for agent in ("sweagent", "mini"):
        assert counts[(agent, "opening", True)] == 0
        later = counts[(agent, "later", True)] + counts[(agent, "later", False)]
        assert counts[(agent, "later", True)] >= 0.9 * later


def test_an_action_a_summary_was_merged_into_still_counts() -> None:
    merged = render_handoff(Handoff("## Goal\nfix it")) + "\n\n" + ACTION
    messages = [system(), {"role": "assistant", "content": merged}, user("1:a = 1\n2:b = 2")]
    assert is_observation(messages, 2)
    plain = [system(), {"role": "assistant", "content": render_handoff(Handoff("x"))}, user("ok")]
    assert not is_observation(plain, 2)


def test_the_summary_model_reads_observations_as_tool_output_not_as_the_user() -> None:
    listing = "\n".join(f"{n}:    value_{n} = compute({n})" for n in range(1, 30))
    messages = [*after_action(listing + SWE_AGENT_TRAILER), reply("Done."), user("Thanks.")]
    records = render_records(
        messages, messages, 1, len(messages), pair_tool_calls(messages), CompressorOptions()
    )
    labels = [record.text.splitlines()[0] for record in records]
    assert labels == [
        "[#1 USER]",
        "[#2 ASSISTANT]",
        "[#3 TOOL OUTPUT]",
        "[#4 ASSISTANT]",
        "[#5 USER]",
    ]
