"""A build-fixing session for a small window (test support): a system prompt, a user task with
an instruction, build-log tool results of 12 compile lines each, no tools declared, a request
sent after every second tool result, max_tokens 24.

At a 2,048-token window it leaves little that compression may drop: the user's words and the
newest results are carried verbatim, and the model's tokenizer counts about a third more than
ctxgate's estimate. Driven against the simulator (tests/session/) and against a real llama.cpp
server (tests/agents/test_llamacpp.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

SYSTEM = (
    "You are a build engineer agent for the repository /srv/engine. You read build logs and "
    "say in one sentence what to fix next."
)
TASK = (
    "The release build of the engine fails. Find out why from the build logs and fix it. "
    "Instruction: never edit files under third_party/, and keep the -Werror flag on."
)
INSTRUCTION = "Instruction: never edit files under third_party/, and keep the -Werror flag on."
RESULTS = 28
MAX_TOKENS = 24


def build_log(step: int) -> str:
    """12 compile lines of one build step, different per step."""
    lines = []
    for n in range(12):
        unit = f"src/module_{step % 7}/unit_{step}_{n}.cpp"
        if n % 4 == 3:
            lines.append(
                f"{unit}:{40 + n}:{7 + step % 5}: warning: unused variable 'tmp_{step}_{n}' "
                "[-Wunused-variable]"
            )
        else:
            percent = min(99, 3 * step + n)
            lines.append(f"[{percent:3d}%] Building CXX object {unit}.o (step {step}, job {n})")
    return "\n".join(lines)


@dataclass
class BuildSession:
    """The client: resends its whole growing history every second result."""

    client: openai.OpenAI
    model: str
    session_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answered: int = 0

    def __post_init__(self) -> None:
        self.messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TASK},
        ]

    def run(self, results: int = RESULTS) -> None:
        for step in range(results):
            call = {
                "id": f"call_{step}",
                "type": "function",
                "function": {"name": "build", "arguments": json.dumps({"target": f"s{step}"})},
            }
            self.messages.append(
                {"role": "assistant", "content": "Building.", "tool_calls": [call]}
            )
            self.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": build_log(step)}
            )
            if step % 2 == 1:
                self._ask(step)

    def _ask(self, step: int) -> None:
        try:
            completion = self.client.chat.completions.create(
                model=self.model,
                messages=self.messages,  # type: ignore[arg-type]
                max_tokens=MAX_TOKENS,
                temperature=0,
                extra_headers={"X-Session-Id": self.session_id},
            )
        except openai.APIStatusError as exc:
            self.errors.append(f"step {step}: {exc.status_code} {exc.response.text[:300]}")
            return
        self.answered += 1
        answer = completion.choices[0].message.content or "(no answer)"
        self.messages.append({"role": "assistant", "content": answer})
        self.messages.append({"role": "user", "content": f"Continue with step {step + 1}."})
