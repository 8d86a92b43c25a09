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

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anthropic
import openai
import pytest

from compression.handoff import parse_handoff
from compression.prompts import SUMMARY_PREFIX
from tests.servers import ProxyServer, settings_for
from tests.simulator import ModelSpec, Received, Reply, Simulator, is_summary_request
from tests.simulator.responses_items import chat_view, input_items

MODEL = "agent-16k"
WINDOW = 16_384
TOOL_TURNS = 60
KEY = "sk-user-words"
SESSION = "user-words-1"
# Compress at half the window rather than at 85%, as the other long-session tests do: twice
# the compressions in 60 turns, each a chance for a user message to drop out of view.
COMPRESSION: dict[str, Any] = {"options": {"min_threshold_tokens": 1000}}


@dataclass(frozen=True)
class Said:
    """A user message, and the tool turn before which the user sends it (0: the opening)."""

    text: str
    before_turn: int
    instruction: bool


SAID: tuple[Said, ...] = (
    Said(
        "Fix the failing importer tests in /srv/app: run the suite, read the modules it "
        "names and patch them one at a time.",
        0,
        False,
    ),
    Said("From now on, write every log line in JSON instead of plain text.", 8, True),
    Said("ok, go on", 16, False),
    Said(
        "Don't touch the migrations folder; use the fixtures rather than the live database.",
        25,
        True,
    ),
    # Changes the first instruction, worded as people write corrections, without the words
    # ("must", "never", "instead") a reader of rules by keyword would wait for.
    Said("Correction: log lines go out as logfmt, not JSON, from here on.", 33, True),
    # Last, so that no instruction is the newest user message, which a compression restates
    # anyway: the instructions have to survive on their own.
    Said("looks good, next the parser", 44, False),
)
# Lines of tool output per turn, in rotation: about 25 tokens a line, so 300 to 1,500 tokens.
OUTPUT_LINES = (12, 34, 58, 20, 46, 16, 40)
END_OF_PART = "That part is done. Tell me what to do next."


def tool_output(turn: int, what: str) -> str:
    lines = OUTPUT_LINES[turn % len(OUTPUT_LINES)]
    rows = "\n".join(
        f"src/app/module_{turn}.py:{n}: handler_{turn}_{n}(request) -> status {200 + n % 3} "
        f"in {n % 17} ms"
        for n in range(lines)
    )
    return f"$ {what}\n{rows}\nexit code: 0"


def _is_summary(body: dict[str, Any]) -> bool:
    view = chat_view(body, input_items(body)) if "input" in body else body
    return is_summary_request(view)


def _tool_names(body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(spec.get("name"), str):
            names.append(spec["name"])
    return names


@dataclass
class Model:
    """Plays the agent's model: a tool call every turn, except that the turn before a user
    message ends with text, as a model hands back to its user; summary calls get the
    simulator's own deterministic summarizer."""

    end_turn_next: bool = False
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        names = _tool_names(body)
        if not names or _is_summary(body):
            return None
        with self._lock:
            if self.end_turn_next:
                self.end_turn_next = False
                return Reply(content=END_OF_PART, reasoning_content="Hand back to the user.")
            self.calls += 1
            n = self.calls
        name, arguments = self._call(names, n)
        thought = f"Turn {n}: call {name} and read its output."
        return Reply(tool_calls=[{"name": name, "arguments": arguments}], reasoning_content=thought)

    @staticmethod
    def _call(names: list[str], n: int) -> tuple[str, dict[str, Any]]:
        command = f"pytest tests/test_importer_{n}.py -x"
        path = f"src/app/module_{n}.py"
        if "shell" in names:  # Codex: argv through bash
            return "shell", {"command": ["bash", "-lc", command if n % 2 else f"cat {path}"]}
        if "Bash" in names:  # Claude Code
            if n % 2:
                return "Bash", {"command": command, "description": "Run the failing test"}
            return "Read", {"file_path": f"/srv/app/{path}"}
        if n % 2:
            return "terminal", {"command": command}
        return "read_file", {"path": path}


@dataclass(frozen=True)
class Exchange:
    """One client request: ctxgate's response headers and what the provider got for it."""

    headers: dict[str, str]
    forwarded: tuple[Received, ...]

    @property
    def compressed(self) -> bool:
        return self.headers.get("x-ctxgate-compressed") == "true"


class Agent(Protocol):
    def say(self, text: str) -> None: ...

    def turn(self) -> tuple[dict[str, str], bool]:
        """One request: ctxgate's headers, and whether the model called a tool."""
        ...


# ---- the three agents -------------------------------------------------------------------

CHAT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}},
        },
    }
    for name, description, arg in (
        ("read_file", "Read a file of the repository", "path"),
        ("terminal", "Run a shell command in the repository", "command"),
    )
]


class ChatAgent:
    """A plain chat agent: resends its history every turn, one tool result per call."""

    def __init__(self, proxy: ProxyServer) -> None:
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent working in /srv/app."}
        ]
        self.turns = 0

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def turn(self) -> tuple[dict[str, str], bool]:
        raw = self.client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=self.messages,  # type: ignore[arg-type]
            tools=CHAT_TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": SESSION},
        )
        message = raw.parse().choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            self.turns += 1
            what = call.function.arguments  # type: ignore[union-attr]
            output = tool_output(self.turns, what)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        return dict(raw.headers), bool(message.tool_calls)


SHELL: dict[str, Any] = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command and returns its output",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
        "required": ["command"],
    },
}
CODEX_DEVELOPER = (
    "<permissions instructions>Sandbox: workspace-write; network access is restricted."
    "</permissions instructions>"
)


def _message_item(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


class CodexAgent:
    """Codex's shape: `store: false` with the whole history resent, streamed, the model's output
    items (encrypted reasoning included) handed back as they came."""

    def __init__(self, proxy: ProxyServer) -> None:
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        self.items: list[dict[str, Any]] = [_message_item("developer", CODEX_DEVELOPER)]
        self.turns = 0

    def say(self, text: str) -> None:
        self.items.append(_message_item("user", text))

    def turn(self) -> tuple[dict[str, str], bool]:
        # Codex's body, as a plain dict: its items are the model's own, handed back as dumped.
        request: dict[str, Any] = {
            "model": MODEL,
            "input": self.items,
            "tools": [SHELL],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": SESSION,
            "extra_headers": {"session-id": SESSION},
        }
        events = self.client.responses.create(**request, stream=True)
        headers = dict(events.response.headers)
        [response] = [e.response for e in events if e.type == "response.completed"]
        called = False
        for item in response.output:
            self.items.append(item.model_dump(mode="json", exclude_none=True))
            if item.type == "function_call":
                called = True
                self.turns += 1
                output = tool_output(self.turns, " ".join(json.loads(item.arguments)["command"]))
                self.items.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
        return headers, called


CLAUDE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": "Executes a bash command",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "Read",
        "description": "Reads a file from the local filesystem",
        "input_schema": {
            "type": "object",
            "properties": {"file_path": {"type": "string"}},
            "required": ["file_path"],
        },
    },
]


class ClaudeCodeAgent:
    """Claude Code's shape: system blocks and the last message block carry cache_control,
    thinking is on and echoed byte for byte, tool results go back as tool_result blocks."""

    def __init__(self, proxy: ProxyServer) -> None:
        root = proxy.base_url.removesuffix("/v1")
        self.client = anthropic.Anthropic(base_url=root, api_key=KEY, max_retries=0, timeout=60)
        self.messages: list[dict[str, Any]] = []
        self.turns = 0

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})

    def _marked(self) -> list[dict[str, Any]]:
        """One breakpoint on the last block of the last message, as Claude Code places it."""
        out = [dict(m) for m in self.messages]
        blocks = out[-1]["content"]
        out[-1]["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]
        return out

    def turn(self) -> tuple[dict[str, str], bool]:
        system = [
            {
                "type": "text",
                "text": "You are Claude Code, working in /srv/app.",
                "cache_control": {"type": "ephemeral"},
            }
        ]
        with self.client.messages.stream(
            model=MODEL,
            max_tokens=32_000,
            system=system,  # type: ignore[arg-type]
            messages=self._marked(),  # type: ignore[arg-type]
            tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 1024},
            metadata={"user_id": json.dumps({"session_id": SESSION})},
            extra_headers={"x-claude-code-session-id": SESSION},
        ) as stream:
            headers = dict(stream.response.headers)
            final = stream.get_final_message()
        content = [block.model_dump(exclude_none=True) for block in final.content]
        self.messages.append({"role": "assistant", "content": content})
        results: list[dict[str, Any]] = []
        for block in content:
            if block["type"] == "tool_use":
                self.turns += 1
                output = tool_output(self.turns, json.dumps(block["input"]))
                results.append(
                    {"type": "tool_result", "tool_use_id": block["id"], "content": output}
                )
        if results:
            self.messages.append({"role": "user", "content": results})
        return headers, bool(results)


# ---- driving a session ------------------------------------------------------------------


@dataclass
class Session:
    exchanges: list[Exchange]
    first_with: list[int]  # per user message: the first exchange that carried it


def drive(
    agent: Agent, model: Model, sim: Simulator, forwarded: Callable[[Received], bool]
) -> Session:
    exchanges: list[Exchange] = []
    first_with: list[int] = []

    def ask() -> bool:
        start = len(sim.received)
        headers, called = agent.turn()
        # Requests run one at a time, so what arrived meanwhile belongs to this one, except a
        # background compression's summary call, which is not a forwarded request.
        mine = [r for r in sim.received[start:] if forwarded(r) and not r.is_summary]
        exchanges.append(Exchange(headers, tuple(mine)))
        return called

    for turn in range(TOOL_TURNS):
        for said in SAID:
            if said.before_turn != turn:
                continue
            if exchanges:  # the model hands back before the user speaks
                model.end_turn_next = True
                assert not ask(), "the model was to end its turn here"
            agent.say(said.text)
            first_with.append(len(exchanges))
        assert ask(), f"tool turn {turn} made no tool call"
    return Session(exchanges, first_with)


# ---- what the provider received ---------------------------------------------------------


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
