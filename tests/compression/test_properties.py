"""Property-based tests: generated agent transcripts through the whole engine."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compression.assembly.invariants import check_invariants
from compression.compressor import Compressor
from compression.engine import SummaryCallError, SummaryReply
from compression.messages.types import ContentPart, Message
from compression.options import CompressorOptions
from compression.summary.handoff import Handoff, handoff_text, parse_handoff, render_handoff
from tests.compression.builders import context, text_of
from tests.compression.counters import CharCounter
from tests.compression.summarizers import SUMMARY_BODY, ScriptedSummarizer

WORDS = st.text(alphabet="abcdefghij klmnop\n", min_size=0, max_size=60)
IDS = st.sampled_from([f"call_{n}" for n in range(6)])  # a small pool: ids get reused
IMAGE: ContentPart = {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}
ENGINE = Compressor(CompressorOptions())
RECORD_IDS = st.sampled_from(["", " rec_0001", " id=ab_1234", " see /repo/src/app.py", " HAT136"])
OBSERVATION = "<returncode>"


@st.composite
def user_message(draw: st.DrawFn, number: int) -> Message:
    text = f"u{number}: " + draw(WORDS)
    if draw(st.integers(0, 5)) == 0:
        return {"role": "user", "content": [{"type": "text", "text": text}, IMAGE]}
    return {"role": "user", "content": text}


@st.composite
def tool_round(draw: st.DrawFn) -> list[Message]:
    ids = draw(st.lists(IDS, min_size=1, max_size=3, unique=True))
    text = draw(st.sampled_from([None, "", "Let me check."]))
    calls = [
        {
            "id": i,
            "type": "function",
            "function": {
                "name": draw(st.sampled_from(["bash", "read_file", "lookup"])),
                "arguments": draw(
                    st.sampled_from(
                        [
                            '{"command": "ls"}',
                            '{"path": "a.py"}',
                            "{}",
                            "not json",
                            '{"content": "' + "x" * 700 + '"}',
                        ]
                    )
                ),
            },
        }
        for i in ids
    ]
    results: list[Message] = []
    for call_id in draw(st.permutations(ids)):
        size = draw(st.sampled_from([0, 10, 300, 1_500, 4_000]))
        body: Any = ("out " * size)[:size] + draw(RECORD_IDS)
        if draw(st.integers(0, 7)) == 0:
            body = [{"type": "text", "text": "shot"}, IMAGE]
        results.append({"role": "tool", "tool_call_id": call_id, "content": body})
    return [{"role": "assistant", "content": text, "tool_calls": calls}, *results]


@st.composite
def text_action_round(draw: st.DrawFn) -> list[Message]:
    """A text-action agent: the action in a fenced block, its output back as a `user` turn."""
    code = draw(st.integers(0, 2))
    output = ("line of output\n" * draw(st.sampled_from([1, 40, 300]))) + draw(RECORD_IDS)
    return [
        {"role": "assistant", "content": f"Running it.\n```bash\nmake t{code}\n```"},
        {"role": "user", "content": f"{OBSERVATION}{code}</returncode>\n<output>\n{output}"},
    ]


def old_summary(number: int, role: str) -> Message:
    body = Handoff(f"## Goal\nold summary {number}", (f"carried {number}",), None)
    return {"role": role, "content": render_handoff(body)}  # type: ignore[typeddict-item]


@st.composite
def transcript(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "system prompt " * 20}]
    if draw(st.booleans()):
        messages.append({"role": "developer", "content": "developer rules"})
    turns = draw(st.integers(1, 8))
    for turn in range(turns):
        if draw(st.integers(0, 4)) == 0:
            messages.append(old_summary(turn, draw(st.sampled_from(["user", "assistant"]))))
        messages.append(draw(user_message(turn)))
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(st.integers(0, 4))
            if kind == 0:
                messages.append({"role": "assistant", "content": draw(WORDS) or "thinking"})
            elif kind == 1:
                messages += draw(text_action_round())
            else:
                messages += draw(tool_round())
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": f"answer {turn}"})
    last = max(i for i, m in enumerate(messages) if m["role"] in ("user", "tool"))
    return messages[: last + 1]


SCRIPTS = st.sampled_from(
    [
        SummaryReply(SUMMARY_BODY, "stop"),
        SummaryReply("## Goal\n" + "long line of summary\n" * 2_000, "stop"),
        SummaryReply("", "stop"),
        SummaryReply(SUMMARY_BODY, "length"),
        SummaryCallError("boom", status=500),
        SummaryCallError("slow", timeout=True),
    ]
)


def view_text(message: Message) -> str:
    arguments = [c["function"]["arguments"] for c in message.get("tool_calls") or []]
    return "\n".join([text_of(message), *arguments])


def handoffs(messages: list[Message]) -> list[Handoff]:
    found = []
    for message in messages:
        text = handoff_text(message)
        parsed = parse_handoff(text) if text is not None else None
        if parsed is not None:
            found.append(parsed.handoff)
    return found


def texts(message: Message) -> list[str]:
    content = message.get("content")
    if isinstance(content, list):
        return [p["text"] for p in content if p.get("type") == "text" and p.get("text")]
    return [content] if isinstance(content, str) and content else []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=transcript(),
    step=SCRIPTS,
    context_length=st.sampled_from([8_000, 16_000, 32_000]),
    force=st.sampled_from([True, True, True, False]),
)
async def test_every_result_is_valid_and_keeps_what_must_survive(
    messages: list[Message], step: SummaryReply | BaseException, context_length: int, force: bool
) -> None:
    before = copy.deepcopy(messages)
    counter = CharCounter()
    ctx = context(
        summarize=ScriptedSummarizer(step),
        context_length=context_length,
        counter=counter,
        force=force,
        now=1.0,
    )
    out = await ENGINE.compress(messages, ctx)
    event(out.outcome)
    assert messages == before
    check_invariants(out.messages)
    assert out.failure_class != "invariant", out.error
    assert out.messages[0] is messages[0]
    assert counter.count_messages(out.messages) <= counter.count_messages(messages)
    joined = "\n".join(text_of(m) for m in out.messages)
    users = [
        m
        for m in messages
        if m["role"] == "user"
        and texts(m)
        and not text_of(m).startswith(("[CONTEXT COMPACTION", OBSERVATION))
    ]
    for message in users:  # the newest one, and every one of the summarized region
        for text in texts(message):
            assert text in joined
    source = "\n".join(view_text(m) for m in messages)
    for handoff in handoffs(out.messages):
        event("anchors carried" if handoff.anchors else "no anchors")
        # tool output sent back as `user` turns is summarized, never carried as the user's
        assert not any(text.startswith(OBSERVATION) for text in handoff.user_messages)
        for tier in handoff.anchors.tiers():  # every anchor is copied, never invented
            assert all(value in source for value in tier)
    if out.outcome in ("compressed", "fallback"):
        kept = len(messages) - out.replaced_upto
        assert all(
            a is b
            for a, b in zip(
                out.messages[len(out.messages) - kept :], messages[out.replaced_upto :], strict=True
            )
        )
        assert out.tokens_after < out.tokens_before
    else:
        assert out.messages == messages
