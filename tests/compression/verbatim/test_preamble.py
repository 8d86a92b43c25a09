"""A client's canned opening (few-shot examples, acknowledged context) is fixed head, and the
original request the handoff carries is the user's, not the client's example."""

from __future__ import annotations

from compression.compressor import Compressor
from compression.messages.types import Message
from compression.state import EngineState
from compression.summary.handoff import handoff_text, parse_handoff
from compression.verbatim.preamble import preamble_end
from tests.compression import aider
from tests.compression.builders import agent_session, context, reply, system, user
from tests.compression.summarizers import ScriptedSummarizer

REAL_REQUEST = "Add retries with exponential backoff to fetch() in net/client.py; never change its "
REAL_REQUEST += "signature."
ASKS = [REAL_REQUEST] + [f"Now make attempt {n} log its delay." for n in range(1, 16)]
OPENING = len(aider.opening())


def test_the_opening_ends_where_the_real_request_starts_and_stays_there() -> None:
    # The first request also holds the added files (acknowledged) before the request; later
    # ones hold the conversation there, and the files move to just before the newest message.
    for made in range(1, len(ASKS) + 1):
        messages = aider.request(ASKS[:made])
        end = preamble_end(messages)
        assert messages[end]["content"] == REAL_REQUEST
        assert end == (OPENING + 2 if made == 1 else OPENING)


def test_openings_that_are_not_canned_are_left_alone() -> None:
    agent = agent_session(rounds=2)
    assert preamble_end(agent) == 1
    short_first_answer = [system(), user("Rename foo to bar"), reply("Ok."), user("Thanks, now")]
    assert preamble_end(short_first_answer) == 1
    acknowledged = [
        system(),
        user("Fix the login bug."),
        reply("The bug was in auth.py:\n\n```diff\n- if user:\n+ if user is not None:\n```"),
        user("Use tabs from now on."),
        reply("Ok, I'll use tabs from now on."),  # not a bare reset: no canned opening
        user("Now the logout bug."),
    ]
    assert preamble_end(acknowledged) == 1
    text_agent = [
        system(),
        user("Please fix the failing test in tests/test_app.py."),
        reply("Let me look.\n```bash\npytest -q\n```"),
        user("<returncode>1</returncode>\n<output>\nE   AssertionError: 2 != 3\n</output>"),
        reply("Now the file.\n```bash\ncat -n app.py\n```"),
        user("Thanks."),
        reply("Ok."),
        user("And the changelog?"),
    ]
    assert preamble_end(text_agent) == 1
    assert preamble_end([user("hi")]) == 0
    assert preamble_end([]) == 0


async def compressed(messages: list[Message], state: EngineState) -> list[Message]:
    engine = Compressor()
    out = await engine.compress(
        messages, context(summarize=ScriptedSummarizer(), state=state, now=1_000_000.0)
    )
    assert out.outcome == "compressed", out.error
    return out.messages


def carried(messages: list[Message]) -> tuple[str, ...]:
    texts = [handoff_text(m) for m in messages]
    summaries = [parse_handoff(t) for t in texts if t is not None]
    assert len(summaries) == 1 and summaries[0] is not None
    return summaries[0].handoff.user_messages


async def test_a_later_compression_carries_the_users_request_not_the_example() -> None:
    messages = aider.request(ASKS)
    for state in (EngineState(), EngineState(compression_count=1)):
        out = await compressed(messages, state)
        # The canned opening stays verbatim (the very same messages) at the head.
        assert all(a is b for a, b in zip(out[:OPENING], messages[:OPENING], strict=True))
        users = carried(out)
        assert aider.EXAMPLE_REQUEST not in users
        assert aider.RESET not in users
        if state.compression_count:
            assert users[0] == REAL_REQUEST
