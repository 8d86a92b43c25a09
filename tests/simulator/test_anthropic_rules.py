"""The rules the simulator's Anthropic Messages dialect enforces as the real API does: tool
pairing, signed thinking blocks (an altered one is refused), the thinking a tool loop in
progress must keep; and recorded Claude Code requests that pass every rule."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from tests.simulator import (
    Simulator,
)

# Fixtures (tests/simulator/fixtures.py says why they are imported "as" themselves).
from tests.simulator.anthropic_fixtures import SAMPLES, tool_result, tool_use, user
from tests.simulator.anthropic_fixtures import client as client
from tests.simulator.anthropic_fixtures import reset as reset
from tests.simulator.anthropic_fixtures import sim as sim
from tests.simulator.anthropic_rules import ThinkingSigner


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [
                user("go"),
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [tool_result("toolu_x")]},
            ],
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message.",
        ),
        (
            [user("go"), {"role": "assistant", "content": [tool_use("toolu_a")]}, user("next")],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_a. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message.",
        ),
        (
            [
                user("go"),
                {"role": "assistant", "content": [tool_use("toolu_a")]},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi"}, tool_result("toolu_a")],
                },
            ],
            "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. "
            "Messages following `tool_use` blocks must begin with a matching number of "
            "`tool_result` blocks.",
        ),
    ],
    ids=["orphan_result", "unanswered_call", "result_not_first"],
)
def test_tool_pairing_is_enforced(
    sim: Simulator, client: anthropic.Anthropic, messages: list[Any], expected: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-x", max_tokens=8, messages=messages)
    assert caught.value.body["error"] == {"type": "invalid_request_error", "message": expected}  # type: ignore[index]
    assert sim.messages_requests[0].problems == [expected]


def test_a_paired_history_with_a_system_entry_between_is_accepted(
    client: anthropic.Anthropic,
) -> None:
    messages = [
        user("go"),
        {"role": "assistant", "content": [tool_use("toolu_a")]},
        {"role": "system", "content": "reminder"},
        {"role": "user", "content": [tool_result("toolu_a")]},
    ]
    answer = client.messages.create(model="claude-x", max_tokens=8, messages=messages)  # type: ignore[arg-type]
    assert answer.stop_reason == "end_turn"


def test_thinking_is_signed_and_an_altered_block_is_refused(client: anthropic.Anthropic) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = client.messages.create(
        model="claude-x",
        max_tokens=2048,
        thinking=thinking,
        messages=[user("think")],  # type: ignore[arg-type]
    )
    block = first.content[0].model_dump()
    assert block["type"] == "thinking" and block["signature"]
    history = [user("think"), {"role": "assistant", "content": [block]}, user("again")]
    ok = client.messages.create(
        model="claude-x",
        max_tokens=2048,
        thinking=thinking,
        messages=history,  # type: ignore[arg-type]
    )
    assert ok.stop_reason == "end_turn"
    altered = {**block, "thinking": block["thinking"] + " (edited)"}
    history[1] = {"role": "assistant", "content": [altered]}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-x", max_tokens=2048, thinking=thinking, messages=history
        )  # type: ignore[arg-type]
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_a_tool_loop_in_progress_must_keep_its_thinking(client: anthropic.Anthropic) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    signed = client.messages.create(
        model="claude-x",
        max_tokens=2048,
        thinking=thinking,
        messages=[user("think")],  # type: ignore[arg-type]
    )
    block = signed.content[0].model_dump()
    kept = [block, tool_use("toolu_a")]
    history = [user("go"), {"role": "assistant", "content": kept}, user_results("toolu_a")]
    client.messages.create(model="claude-x", max_tokens=2048, thinking=thinking, messages=history)  # type: ignore[arg-type]
    history[1] = {"role": "assistant", "content": [tool_use("toolu_a")]}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-x", max_tokens=2048, thinking=thinking, messages=history
        )  # type: ignore[arg-type]
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
        "thinking block"
    )
    # Without thinking, or once the loop is closed by a text turn, nothing is required.
    client.messages.create(model="claude-x", max_tokens=2048, messages=history)  # type: ignore[arg-type]
    closed = [*history, {"role": "assistant", "content": "done"}, user("thanks")]
    client.messages.create(model="claude-x", max_tokens=2048, thinking=thinking, messages=closed)  # type: ignore[arg-type]


def user_results(*call_ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [tool_result(c) for c in call_ids]}


def test_omitted_thinking_keeps_only_the_signature(client: anthropic.Anthropic) -> None:
    thinking = {"type": "adaptive", "display": "omitted"}
    answer = client.messages.create(
        model="claude-x",
        max_tokens=64,
        thinking=thinking,
        messages=[user("think")],  # type: ignore[arg-type]
    )
    block = answer.content[0].model_dump()
    assert block["type"] == "thinking" and block["thinking"] == "" and block["signature"]


@pytest.mark.parametrize("name", ["sonnet-4-5-bash-turn4", "sonnet-5-5-bash-turn4"])
def test_recorded_claude_code_requests_pass_every_rule(sim: Simulator, name: str) -> None:
    sample = json.loads((SAMPLES / f"{name}.json").read_text())
    headers = {k: v for k, v in sample["headers"].items() if k != "accept-encoding"}
    sim.messages_api.signer = ThinkingSigner(b"ctxgate-sample-key")
    try:
        ok = httpx.post(sim.url + sample["path"], json=sample["body"], headers=headers)
        sim.messages_api.signer = ThinkingSigner(b"another key")
        refused = httpx.post(sim.url + sample["path"], json=sample["body"], headers=headers)
    finally:
        sim.messages_api.signer = ThinkingSigner()
    assert ok.status_code == 200 and sim.messages_requests[0].problems == []
    assert refused.status_code == 400
    assert "Invalid `signature` in `thinking` block" in refused.json()["error"]["message"]
