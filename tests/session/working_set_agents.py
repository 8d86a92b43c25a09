"""A one-task coding session on each wire API, for the working-set test
(tests/session/test_working_set.py).

The user asks to fix one file. The model reads it, works through six other modules (reads
each, runs the tests, edits it), reads the named file again, works through the six modules
once more (newer reads, more edits) and only then edits the named file. Each agent speaks its
API as the agent that uses it does: a chat agent (read_file/edit/terminal), Codex on the
Responses API (`shell` with `cat` and `apply_patch`), Claude Code on Messages (Read/Edit/Bash)
and a Gemini CLI-shaped client on generateContent (read_file/replace/run_shell_command).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import httpx
import openai

from tests.proxy.responses_agent import SHELL
from tests.servers import ProxyServer
from tests.simulator import Reply, is_summary_request
from tests.simulator.responses_items import chat_view, input_items

MODEL = "coder-32k"
WINDOW = 32_768
KEY = "sk-working-set"
SESSION = "working-set-1"
ROOT = "/srv/shop"
TARGET = "src/shop/billing.py"
OTHERS = tuple(
    f"src/shop/{name}.py"
    for name in ("orders", "customers", "tax", "shipping", "payments", "reports")
)
REQUEST = (
    f"Fix the rounding bug in {TARGET}: invoice totals come out one cent off when a "
    "discount applies. Look at how the other modules call it before you change it."
)
DONE = "The rounding bug is fixed."


def file_text(path: str, version: int) -> str:
    """The file as a read shows it: numbered lines that name the path and the read."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    lines = 70 if path == TARGET else 64
    return "\n".join(
        f"{n:5}\tdef {stem}_step_{n}(invoice, rate):  "
        f"return settle_{stem}(invoice, rate, {n}, revision={version})"
        for n in range(1, lines + 1)
    )


def test_output(step: int) -> str:
    return "\n".join(
        f"tests/test_suite_{step}.py::test_case_{n} PASSED in {n % 9}.{n % 7}s [{n * 2}%]"
        for n in range(50)
    )


# ---- the plan ---------------------------------------------------------------------------------

Action = tuple[str, str]  # ("read" | "edit" | "test", path or "")


def plan() -> list[Action]:
    """The model's actions, in order."""
    actions: list[Action] = [("read", TARGET)]
    for path in OTHERS:
        actions += [("read", path), ("test", ""), ("edit", path), ("test", "")]
    actions += [("test", ""), ("read", TARGET)]
    for path in OTHERS:
        actions += [("test", ""), ("read", path), ("edit", path), ("test", "")]
    actions += [("test", ""), ("test", ""), ("edit", TARGET)]
    return actions


PLAN = plan()
REREAD = PLAN.index(("read", TARGET), 1)


class Repository:
    """What the tools return: every read of a file shows a new revision of it."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}
        self.steps = 0

    def read(self, path: str) -> str:
        path = path.removeprefix(ROOT + "/")
        self.reads[path] = self.reads.get(path, 0) + 1
        return file_text(path, self.reads[path])

    def run(self, command: str) -> str:
        self.steps += 1
        if command.startswith("cat "):
            return self.read(command.removeprefix("cat ").strip())
        if command.startswith("apply_patch") or "*** Begin Patch" in command:
            return "Success. Updated the following files."
        return f"$ {command}\n{test_output(self.steps)}\nexit code: 0"

    def edited(self) -> str:
        self.steps += 1
        return "The file has been updated."


# ---- the model --------------------------------------------------------------------------------


def _tool_names(body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(spec.get("name"), str):
            names.append(spec["name"])
    return names


def _is_summary(body: dict[str, Any]) -> bool:
    view = chat_view(body, input_items(body)) if "input" in body else body
    return is_summary_request(view)


def encode(names: list[str], action: Action, step: int) -> tuple[str, dict[str, Any]]:
    """The call that performs `action` with the tools the request offers."""
    kind, path = action
    full = f"{ROOT}/{path}"
    patch = f"*** Begin Patch\n*** Update File: {path}\n@@\n-revision\n+revision\n*** End Patch"
    command = f"pytest tests/test_suite_{step}.py -q"
    if "shell" in names:  # Codex
        script = {"read": f"cat {path}", "edit": f"apply_patch <<'EOF'\n{patch}\nEOF"}
        return "shell", {"command": ["bash", "-lc", script.get(kind, command)]}
    if "Bash" in names:  # Claude Code
        if kind == "read":
            return "Read", {"file_path": full}
        if kind == "edit":
            return "Edit", {"file_path": full, "old_string": "settle_", "new_string": "settled_"}
        return "Bash", {"command": command}
    if "run_shell_command" in names:  # Gemini CLI
        if kind == "read":
            return "read_file", {"absolute_path": full}
        if kind == "edit":
            return "replace", {"file_path": full, "old_string": "settle_", "new_string": "fix_"}
        return "run_shell_command", {"command": command}
    if kind == "read":
        return "read_file", {"path": path}
    if kind == "edit":
        return "edit", {"path": path, "old_string": "settle_", "new_string": "settled_"}
    return "terminal", {"command": command}


@dataclass
class Model:
    """Follows the plan one call a request (summary calls go to the simulator's summarizer),
    then ends its turn."""

    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        names = _tool_names(body)
        if not names or _is_summary(body):
            return None
        with self._lock:
            step = self.calls
            self.calls += 1
        if step >= len(PLAN):
            return Reply(content=DONE)
        name, arguments = encode(names, PLAN[step], step)
        return Reply(tool_calls=[{"name": name, "arguments": arguments}])


# ---- the agents -------------------------------------------------------------------------------


class Agent(Protocol):
    def turn(self) -> bool:
        """One request; whether the model called a tool."""
        ...


def _function(name: str, *args: str) -> dict[str, Any]:
    properties = {arg: {"type": "string"} for arg in args}
    return {
        "name": name,
        "description": name,
        "parameters": {"type": "object", "properties": properties},
    }


CHAT_TOOLS = [
    {"type": "function", "function": _function(name, *args)}
    for name, args in (
        ("read_file", ("path",)),
        ("edit", ("path", "old_string", "new_string")),
        ("terminal", ("command",)),
    )
]


def _answer(repo: Repository, name: str, args: dict[str, Any]) -> str:
    """What a chat, Claude Code or Gemini tool returns."""
    if name in ("read_file", "Read"):
        path = args.get("path") or args.get("file_path") or args.get("absolute_path")
        return repo.read(str(path))
    if name in ("edit", "Edit", "replace"):
        return repo.edited()
    return repo.run(str(args.get("command", "")))


class ChatAgent:
    def __init__(self, proxy: ProxyServer, repo: Repository) -> None:
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        self.repo = repo
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"You are a coding agent working in {ROOT}."},
            {"role": "user", "content": REQUEST},
        ]

    def turn(self) -> bool:
        completion = self.client.chat.completions.create(
            model=MODEL,
            messages=self.messages,  # type: ignore[arg-type]
            tools=CHAT_TOOLS,  # type: ignore[arg-type]
            extra_headers={"X-Session-Id": SESSION},
        )
        message = completion.choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            output = _answer(self.repo, call.function.name, args)  # type: ignore[union-attr]
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        return bool(message.tool_calls)


def _message_item(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


class CodexAgent:
    def __init__(self, proxy: ProxyServer, repo: Repository) -> None:
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        self.repo = repo
        self.items: list[dict[str, Any]] = [
            _message_item("developer", "Sandbox: workspace-write."),
            _message_item("user", REQUEST),
        ]

    def turn(self) -> bool:
        # Codex's body, as a plain dict: its items are the model's own, handed back as dumped.
        request: dict[str, Any] = {
            "model": MODEL,
            "input": self.items,
            "tools": [SHELL],
            "store": False,
            "stream": True,
            "extra_headers": {"session-id": SESSION},
        }
        events = self.client.responses.create(**request)
        [response] = [e.response for e in events if e.type == "response.completed"]
        called = False
        for item in response.output:
            self.items.append(item.model_dump(mode="json", exclude_none=True))
            if item.type == "function_call":
                called = True
                script = json.loads(item.arguments)["command"][-1]
                output = self.repo.run(script)
                self.items.append(
                    {"type": "function_call_output", "call_id": item.call_id, "output": output}
                )
        return called


CLAUDE_TOOLS = [
    {"name": spec["name"], "description": spec["name"], "input_schema": spec["parameters"]}
    for spec in (
        _function("Read", "file_path"),
        _function("Edit", "file_path", "old_string", "new_string"),
        _function("Bash", "command"),
    )
]


class ClaudeCodeAgent:
    def __init__(self, proxy: ProxyServer, repo: Repository) -> None:
        root = proxy.base_url.removesuffix("/v1")
        self.client = anthropic.Anthropic(base_url=root, api_key=KEY, max_retries=0, timeout=60)
        self.repo = repo
        self.messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": REQUEST}]}
        ]

    def turn(self) -> bool:
        final = self.client.messages.create(
            model=MODEL,
            max_tokens=8_000,
            system=f"You are Claude Code, working in {ROOT}.",
            messages=self.messages,  # type: ignore[arg-type]
            tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
            extra_headers={"x-claude-code-session-id": SESSION},
        )
        content = [block.model_dump(exclude_none=True) for block in final.content]
        self.messages.append({"role": "assistant", "content": content})
        results = [
            {
                "type": "tool_result",
                "tool_use_id": block["id"],
                "content": _answer(self.repo, block["name"], block["input"]),
            }
            for block in content
            if block["type"] == "tool_use"
        ]
        if results:
            self.messages.append({"role": "user", "content": results})
        return bool(results)


GEMINI_TOOLS = [
    {
        "functionDeclarations": [
            _function("read_file", "absolute_path"),
            _function("replace", "file_path", "old_string", "new_string"),
            _function("run_shell_command", "command"),
        ]
    }
]


class GeminiAgent:
    """Gemini CLI's shape: the whole history resent, the model's parts echoed as they came."""

    def __init__(self, proxy: ProxyServer, repo: Repository) -> None:
        self.url = f"http://127.0.0.1:{proxy.port}/v1beta/models/{MODEL}:generateContent"
        self.repo = repo
        self.contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": REQUEST}]}]

    def turn(self) -> bool:
        body = {
            "contents": self.contents,
            "systemInstruction": {"parts": [{"text": f"You are a coding agent in {ROOT}."}]},
            "tools": GEMINI_TOOLS,
        }
        headers = {"x-goog-api-key": KEY, "x-ctxgate-session-id": SESSION}
        answer = httpx.post(self.url, json=body, headers=headers, timeout=60)
        answer.raise_for_status()
        parts = answer.json()["candidates"][0]["content"]["parts"]
        self.contents.append({"role": "model", "parts": parts})
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        if not calls:
            return False
        responses = [
            {
                "functionResponse": {
                    **({"id": call["id"]} if "id" in call else {}),
                    "name": call["name"],
                    "response": {"output": _answer(self.repo, call["name"], call["args"])},
                }
            }
            for call in calls
        ]
        self.contents.append({"role": "user", "parts": responses})
        return True
