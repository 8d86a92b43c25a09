"""A Responses API agent driven by the official `openai` SDK (test support).

Like Codex it resends its whole history every turn (`store: false`, encrypted reasoning
included), hands the model's output items back as they came, and answers each shell call with
a long output. The simulator's `ShellAgent` plays the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

INSTRUCTIONS = "You are a coding agent. Use the shell tool; keep going until the steps are done."
DEVELOPER = "Sandbox: workspace-write. Never touch tests/legacy/. " * 8
TASK = "Run the numbered steps with the shell, one at a time. Constraint: keep app/core.py's API."
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


def shell_output(step: int, lines: int) -> str:
    rows = "\n".join(
        f"step {step} line {n}: handler_{step}_{n}() -> ok in {n % 13} ms" for n in range(lines)
    )
    return f"$ step {step}\n{rows}\nexit code: 0"


@dataclass
class ResponsesAgent:
    client: openai.OpenAI
    model: str
    session: str
    output_lines: int = 60
    items: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)  # ctxgate's, per turn
    steps: int = 0

    def __post_init__(self) -> None:
        self.items = [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": DEVELOPER}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]},
        ]

    def request(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "instructions": INSTRUCTIONS,
            "input": self.items,
            "tools": [SHELL],
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": self.session,
            "extra_headers": {"session-id": self.session},
        }

    def turn(self, stream: bool) -> bool:
        """One model turn and the shell calls it asked for; False once the model is done."""
        if stream:
            events = self.client.responses.create(**self.request(), stream=True)
            self.headers.append(dict(events.response.headers))
            done = [event.response for event in events if event.type == "response.completed"]
            assert len(done) == 1
            response = done[0]
        else:
            raw = self.client.responses.with_raw_response.create(**self.request())
            self.headers.append(dict(raw.headers))
            response = raw.parse()
        calls = 0
        for item in response.output:
            self.items.append(item.model_dump(mode="json", exclude_none=True))
            if item.type == "function_call":
                command = json.loads(item.arguments)["command"]
                assert command[0] == "bash"
                self.steps += 1
                calls += 1
                output = shell_output(self.steps, self.output_lines)
                self.items.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
        return calls > 0
