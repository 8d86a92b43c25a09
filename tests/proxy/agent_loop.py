"""A synthetic coding agent that keeps resending its whole growing history (test support).

The simulator plays the model: for ordinary requests it answers with a tool call chosen by the
step number; the agent "runs" the tool and appends a long result. Every few steps the user adds
a message. Early user messages carry constraints that must survive every compression verbatim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from compression.counting.tokens import counter_for_model
from tests.simulator import Reply, Simulator, is_summary_request

SYSTEM = (
    "You are a careful coding agent working in the repository /srv/app. Use the tools to read "
    "files and run the tests. Report what you changed."
)
CONSTRAINTS = [
    "Constraint A: never edit files under tests/legacy/ and keep the public API of app/core.py.",
    "Constraint B: use tabs for indentation in Makefiles; the deadline is Friday 17:00 UTC.",
]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]


def file_body(step: int, lines: int) -> str:
    return "\n".join(
        f"def handler_{step}_{n}(request):  # line {n} of module_{step}.py\n"
        f"    return process(request, retries={n % 7}, timeout={step + n})"
        for n in range(lines)
    )


def runner_output(step: int) -> str:
    failures = "\n".join(
        f"FAILED tests/test_mod_{step}.py::test_case_{n} - AssertionError" for n in range(12)
    )
    return f"{failures}\n===== 12 failed, {40 + step} passed in 3.2s =====\nexit code: 1"


@dataclass
class AgentLoop:
    """Drives `client` through `steps` tool rounds; collects what the client saw."""

    client: openai.OpenAI
    model: str
    session_id: str | None = None
    stream: bool = False
    file_lines: int = 40
    messages: list[dict[str, Any]] = field(default_factory=list)
    responses: list[Any] = field(default_factory=list)
    compressed_headers: list[str] = field(default_factory=list)
    full_tokens: list[int] = field(default_factory=list)  # the client's history at each request

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Fix the failing tests in /srv/app. " + CONSTRAINTS[0]},
        ]

    def script(self, sim: Simulator) -> None:
        """Make the simulator answer like an agent model: one tool call per ordinary turn."""

        def respond(body: dict[str, Any]) -> Reply | None:
            if is_summary_request(body):
                return None  # the simulator's own deterministic summarizer answers
            turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
            if turn % 2 == 0:
                return Reply(
                    tool_calls=[
                        {"name": "read_file", "arguments": {"path": f"app/module_{turn}.py"}}
                    ]
                )
            command = f"pytest tests/test_mod_{turn}.py"
            return Reply(tool_calls=[{"name": "terminal", "arguments": {"command": command}}])

        sim.responder = respond

    def step(self, index: int) -> None:
        if index == 2:
            self.messages.append({"role": "user", "content": CONSTRAINTS[1]})
        elif index > 2 and index % 6 == 0:
            self.messages.append({"role": "user", "content": f"Status check {index}: continue."})
        message = self._ask()
        self.messages.append(message)
        for call in message.get("tool_calls") or []:
            self.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": self._run(call, index)}
            )

    def past_compression(self, turns_after: int = 2, most: int = 80) -> None:
        """Step until ctxgate has compressed the conversation, then `turns_after` turns more."""
        step = len(self.responses)
        while "true" not in self.compressed_headers[: len(self.compressed_headers) - turns_after]:
            assert step < most, "ctxgate never compressed the conversation"
            self.step(step)
            step += 1

    def _run(self, call: dict[str, Any], index: int) -> str:
        args = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "read_file":
            return file_body(index, self.file_lines)
        return f"$ {args['command']}\n{runner_output(index)}"

    def _ask(self) -> dict[str, Any]:
        self.full_tokens.append(counter_for_model("gpt-4o").count_messages(self.messages, TOOLS))
        headers = {"X-Session-Id": self.session_id} if self.session_id else {}
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages,
            "tools": TOOLS,
            "extra_headers": headers,
        }
        if not self.stream:
            raw = self.client.chat.completions.with_raw_response.create(**kwargs)
            self.compressed_headers.append(raw.headers.get("x-ctxgate-compressed", ""))
            completion = raw.parse()
            self.responses.append(completion)
            return completion.choices[0].message.model_dump(exclude_none=True)
        return self._ask_streaming(kwargs)

    def _ask_streaming(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        with self.client.chat.completions.with_streaming_response.create(
            stream=True, **kwargs
        ) as response:
            self.compressed_headers.append(response.headers.get("x-ctxgate-compressed", ""))
            calls: dict[int, dict[str, Any]] = {}
            content = ""
            for chunk in response.parse():
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                content += delta.content or ""
                for part in delta.tool_calls or []:
                    slot = calls.setdefault(
                        part.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    slot["id"] = part.id or slot["id"]
                    if part.function:
                        slot["function"]["name"] += part.function.name or ""
                        slot["function"]["arguments"] += part.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message
