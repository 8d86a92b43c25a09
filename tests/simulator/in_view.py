"""A model that acts on what is in view: the shadow checks' subject.

Its task needs a few items (an instruction, a fact), each a line ``NAME: value`` somewhere in
the conversation it is sent. Its next action is a call of the request's shell tool: with every
item in view, the next step of the task, the items' values in its command
(``step 4 --indent tabs --port 8123``); with one missing, a search for it instead
(``grep -rn 'PORT:' .``). The step is read from the last tool result (``step N done``), which a
compression always keeps, so the action depends on the items in view and nothing else.

``InViewModel(needs, noise=0.0, seed=0)``: deterministic with ``noise=0``; with ``noise=p`` it
adds ``--verbose`` to a command with probability ``p`` (its own seeded generator, so a test run
is repeatable), the way a sampled model varies its answers to one prompt. A call's id carries
the request's output bound (``call_b256_…``), so a test can tell which answers came from
bounded requests. Summary requests are left to the simulator's summarizer.
"""

from __future__ import annotations

import json
import random
import re
import threading
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from .agent import shell_tool
from .dialects import requested_max_tokens
from .models import Reply
from .replies import is_summary_request

_STEP = re.compile(r"step (\d+) done")


@dataclass(frozen=True, slots=True)
class Need:
    """An item the task needs: ``NAME: value`` in view, passed on as ``--flag value``."""

    name: str  # e.g. "PORT"
    value: str  # e.g. "8123"
    flag: str  # e.g. "port"

    @property
    def line(self) -> str:
        return f"{self.name}: {self.value}"


@dataclass
class InViewModel:
    needs: tuple[Need, ...]
    noise: float = 0.0
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _ids: Any = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._ids = count(1)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if is_summary_request(body):
            return None
        tool = shell_tool(body)
        if tool is None:
            return None
        return self.reply(body, tool)

    def action(self, body: dict[str, Any]) -> str:
        """The command this model runs next for `body` (before any noise)."""
        seen = _view_text(body)
        missing = [need for need in self.needs if need.line not in seen]
        if missing:
            return f"grep -rn '{missing[0].name}:' ."
        step = _last_step(body) + 1
        flags = " ".join(f"--{need.flag} {need.value}" for need in self.needs)
        return f"step {step} {flags}".strip()

    def reply(self, body: dict[str, Any], tool: str) -> Reply:
        command = self.action(body)
        with self._lock:
            if self.noise and self._rng.random() < self.noise:
                command += " --verbose"
            n = next(self._ids)
        bound = requested_max_tokens(body)
        call_id = f"call_b{bound or 0}_{n}"
        return Reply(tool_calls=[{"id": call_id, "name": tool, "arguments": {"command": command}}])


def _view_text(body: dict[str, Any]) -> str:
    """Everything the model is shown: system, messages (or Responses input), tool calls."""
    parts = [body.get(key) for key in ("system", "instructions", "messages", "input")]
    return json.dumps([p for p in parts if p is not None], ensure_ascii=False)


def _last_step(body: dict[str, Any]) -> int:
    """The step the last tool result reports done (0 before any)."""
    found = _STEP.findall(_view_text(body))
    return int(found[-1]) if found else 0


def step_result(step: int, filler_lines: int = 0) -> str:
    """What the agent's tool returns for a step: its number, then filler."""
    lines = [f"output line {n} of step {step}: nothing notable" for n in range(filler_lines)]
    return "\n".join([*lines, f"step {step} done"])
