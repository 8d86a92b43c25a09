"""The user's own words stay in view through every compression of a long agent session.

One session per wire API, each shaped as the agent that speaks it sends it: a plain chat agent
(`/v1/chat/completions`, read_file/terminal tools), Codex (`/v1/responses`: a developer item,
the `shell` tool, function_call/function_call_output items, encrypted reasoning, streamed) and
Claude Code (`/v1/messages`: Bash/Read tools, tool_use/tool_result blocks, signed thinking,
cache_control on the last block, `max_tokens: 32000`, streamed). Each runs 60 tool turns
against a 16K-token window with tool outputs of 300 to 1,500 tokens, so ctxgate compresses it
many times. Six user messages arrive along the way (the model ends its turn before each, as it
hands back to its user); three state or change an instruction, the last of them a correction
of the first.

Every request the provider simulator received for a client request sent after a user message
must still hold that message word for word: as a message of its own, or carried in the
verbatim user-message section of ctxgate's handoff summary (or in the message the summary was
merged into). The summary's prose does not count: the simulator's summarizer quotes user lines,
a real one rewrites them, so words the view holds only there are gone at the summary's next
update. A failure names each message and the count of compressed requests that lacked it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compression.summary.handoff import parse_handoff
from compression.summary.prompts import SUMMARY_PREFIX
from tests.servers import ProxyServer, settings_for
from tests.session.user_words_agents import (
    COMPRESSION,
    MODEL,
    SAID,
    TOOL_TURNS,
    WINDOW,
    Agent,
    ChatAgent,
    ClaudeCodeAgent,
    CodexAgent,
    Model,
    Session,
    drive,
)
from tests.simulator import ModelSpec, Received, Simulator
from tests.simulator.responses_items import input_items


def _text(content: Any) -> str:
    """The text parts of a content (chat parts, Responses input/output text, Messages text
    blocks); tool results and images are not the user's words."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    texts = [
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type") in ("text", "input_text", "output_text")
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def verbatim_places(record: Received) -> list[str]:
    """The texts in which a user's words count as in view verbatim: the user, system and
    developer messages of the request and, of a handoff summary, its carried user messages and
    the message it was merged into. Not the summary's prose: the simulator's summarizer quotes
    user lines, a real one rewrites them, so a message the view holds only there can be gone
    after the next update of the summary."""
    body = record.body
    entries = input_items(body) if "input" in body else record.messages
    places: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type", "message") != "message":
            continue  # calls and their outputs: the model's and the tools' words
        text = _text(entry.get("content"))
        at = text.find(SUMMARY_PREFIX)
        if at >= 0:
            places.append(text[:at])
            parsed = parse_handoff(text[at:])
            if parsed is not None:
                places.extend(parsed.handoff.user_messages)
                places.append(parsed.remainder)
        elif entry.get("role") in ("user", "system", "developer"):
            places.append(text)
    return places


@dataclass(frozen=True)
class Miss:
    said: int
    missing: int  # client requests whose forwarded view lacked the message
    compressed: int  # compressed client requests after the message was sent
    first_missing: int | None

    def line(self) -> str:
        kind = "instruction" if SAID[self.said].instruction else "user message"
        first = "" if self.first_missing is None else f", first at request #{self.first_missing}"
        return (
            f"{kind} {self.said} ({SAID[self.said].text[:40]!r}) missing in {self.missing} of "
            f"{self.compressed} compressed requests{first}"
        )


def misses(session: Session, which: Sequence[int]) -> list[Miss]:
    """For each user message in `which`, the client requests after it was sent whose view,
    in any request forwarded for it (an overflow and its retry are two), lacks the message
    verbatim. Every request is checked; only a compressed one can lack it."""
    found: list[Miss] = []
    for said in which:
        words = SAID[said].text
        missing = compressed = 0
        first: int | None = None
        for index in range(session.first_with[said], len(session.exchanges)):
            exchange = session.exchanges[index]
            compressed += exchange.compressed
            held = all(
                any(words in place for place in verbatim_places(record))
                for record in exchange.forwarded
            )
            if not held:
                missing += 1
                first = index if first is None else first
        found.append(Miss(said, missing, compressed, first))
    return found


def report(found: list[Miss]) -> str:
    return "\n".join(miss.line() for miss in found if miss.missing)


# ---- the sessions -----------------------------------------------------------------------


@dataclass(frozen=True)
class Door:
    name: str
    make: Callable[[ProxyServer], Agent]
    forwarded: Callable[[Received], bool]
    spec: ModelSpec
    apis: tuple[str, ...]


DOORS = {
    "chat": Door("chat", ChatAgent, lambda r: r.is_chat, ModelSpec(window=WINDOW), ("chat",)),
    "responses": Door(
        "responses", CodexAgent, lambda r: r.is_responses, ModelSpec(window=WINDOW), ("responses",)
    ),
    "messages": Door(
        "messages",
        ClaudeCodeAgent,
        lambda r: r.is_messages,
        ModelSpec(window=WINDOW, dialect="anthropic"),
        ("messages",),
    ),
}


@pytest.fixture(scope="module", params=list(DOORS))
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """One session per API, shared by the tests below: each reads the same run."""
    door = DOORS[request.param]
    db_path = str(Path(tmp_path_factory.mktemp(door.name)) / "ctxgate.db")
    model = Model()
    with Simulator(models={MODEL: door.spec}) as sim:
        sim.responder = model
        settings = settings_for(
            sim.base_url,
            db_path,
            api_key=None,
            models=[{"match": "*", "upstream": "sim", "context_length": WINDOW}],
            compression=COMPRESSION,
            upstreams={"sim": {"base_url": sim.base_url, "apis": list(door.apis)}},
        )
        with ProxyServer(settings) as proxy:
            yield drive(door.make(proxy), model, sim, door.forwarded)


def test_the_session_is_valid_and_compressed_many_times(session: Session) -> None:
    """Guards the other tests against passing vacuously: every request reached the provider
    valid and answered, and most of the session went out compressed, over several
    checkpoints."""
    exchanges = session.exchanges
    assert len(exchanges) == TOOL_TURNS + len(SAID) - 1
    assert all(e.forwarded and e.forwarded[-1].outcome == "reply" for e in exchanges)
    forwarded = [r for e in exchanges for r in e.forwarded]
    assert [r.problems for r in forwarded if r.problems] == []
    assert all(r.status == 200 for r in forwarded if r.outcome == "reply")
    compressed = [e for e in exchanges if e.compressed]
    checkpoints = {e.headers.get("x-ctxgate-checkpoint") for e in compressed}
    assert len(compressed) >= len(exchanges) // 2, f"{len(compressed)} of {len(exchanges)}"
    assert len(checkpoints - {None}) >= 4, checkpoints
    assert max(r.prompt_tokens or 0 for r in forwarded) <= WINDOW


def test_every_instruction_stays_in_view(session: Session) -> None:
    instructions = [i for i, said in enumerate(SAID) if said.instruction]
    found = misses(session, instructions)
    assert all(miss.compressed > 0 for miss in found)
    assert not any(miss.missing for miss in found), report(found)


def test_every_user_message_stays_in_view(session: Session) -> None:
    """The default budget for carried user messages is meant to hold all of a session like
    this one, so none may be missing, instructions or not."""
    found = misses(session, range(len(SAID)))
    assert not any(miss.missing for miss in found), report(found)
