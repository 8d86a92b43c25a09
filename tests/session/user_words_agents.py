"""Agents shaped as the clients of each wire API, for the user-words tests: a plain chat agent,
Codex on the Responses API and Claude Code on Anthropic Messages, each running tool turns against
the provider simulator while the user speaks up along the way (tests/session/test_user_words.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import openai

from tests.proxy.responses_agent import SHELL
from tests.servers import ProxyServer
from tests.simulator import Received, Reply, Simulator, is_summary_request
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
