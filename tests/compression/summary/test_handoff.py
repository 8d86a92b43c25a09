from __future__ import annotations

from compression.assembly.invariants import check_invariants
from compression.assembly.splice import assemble, summary_role
from compression.messages.types import Message
from compression.summary.handoff import (
    Handoff,
    handoff_text,
    parse_handoff,
    render_handoff,
    user_text,
    view_summaries,
)
from compression.summary.prompts import END_MARKER, IN_PROGRESS_MARKER, SUMMARY_PREFIX
from tests.compression.builders import call, calls, reply, result, system, text_of, user

HANDOFF = Handoff(
    body="## Goal\nShip it.",
    user_messages=("never touch main.py", "use tabs,\nnot spaces"),
    last_reply="All tests pass.",
)


def test_render_has_prefix_body_carried_messages_and_end_marker() -> None:
    text = render_handoff(HANDOFF)
    assert text.startswith(SUMMARY_PREFIX)
    assert text.endswith(END_MARKER)
    assert "## Goal\nShip it." in text
    assert "use tabs,\nnot spaces" in text
    assert text.index("never touch main.py") < text.index("use tabs")


def test_parse_reads_back_what_render_wrote() -> None:
    parsed = parse_handoff(render_handoff(HANDOFF))
    assert parsed is not None
    assert parsed.handoff == HANDOFF
    assert parsed.remainder == ""


def test_parse_separates_a_merged_message() -> None:
    parsed = parse_handoff(render_handoff(HANDOFF) + "\n\nwhat next?")
    assert parsed is not None and parsed.remainder == "what next?"
    assert user_text({"role": "user", "content": render_handoff(HANDOFF) + "\n\nwhat next?"}) == (
        "what next?"
    )


def test_ordinary_text_is_not_a_handoff() -> None:
    assert parse_handoff("hello") is None
    quoted = f"the summary said: {SUMMARY_PREFIX}"
    assert handoff_text(user(quoted)) is None
    assert view_summaries([system(), user(quoted)]) == []


def test_user_text_strips_the_in_progress_marker() -> None:
    assert user_text(user(f"{IN_PROGRESS_MARKER}\n\nfix it")) == "fix it"


def test_summary_role_follows_alternation() -> None:
    assert summary_role("system", "assistant") == "user"
    assert summary_role(None, "assistant") == "user"
    assert summary_role("system", "user") is None
    assert summary_role("user", "user") == "assistant"
    assert summary_role("assistant", "assistant") == "user"
    assert summary_role("tool", "user") == "assistant"
    assert summary_role("user", "assistant") is None
    assert summary_role("assistant", "user") is None


def test_assembly_after_a_system_prompt_uses_a_user_summary() -> None:
    tail = [calls(call("a")), result("a", "ok"), reply("done")]
    out = assemble([system()], HANDOFF, None, tail)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "assistant"]
    assert out[2] is tail[0]
    check_invariants(out)


def test_assembly_merges_when_both_roles_collide() -> None:
    tail = [user("latest ask")]
    out = assemble([system()], HANDOFF, None, tail)
    assert len(out) == 2
    text = text_of(out[1])
    assert text.startswith(SUMMARY_PREFIX)
    assert text.endswith(END_MARKER + "\n\nlatest ask")
    assert tail[0]["content"] == "latest ask"


def test_assembly_restates_the_request_in_progress() -> None:
    ask = user("migrate the database")
    tail = [calls(call("a")), result("a", "ok")]
    out = assemble([system()], HANDOFF, ask, tail)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    merged = text_of(out[1])
    assert merged.index(END_MARKER) < merged.index(IN_PROGRESS_MARKER)
    assert merged.endswith("migrate the database")


def test_restating_list_content_keeps_its_parts() -> None:
    ask: Message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ],
    }
    out = assemble(
        [system(), user("a"), reply("b")], HANDOFF, ask, [calls(call("a")), result("a", "ok")]
    )
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "tool"]
    merged = out[3]
    assert merged["content"][2:] == ask["content"]  # type: ignore[index]
    assert text_of(merged).startswith(SUMMARY_PREFIX)
    assert IN_PROGRESS_MARKER in text_of(merged)
    check_invariants(out)
