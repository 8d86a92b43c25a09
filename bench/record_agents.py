"""Record real-agent transcripts for the evaluation corpus (tests/data/corpus/agents_*.jsonl).

    .venv/bin/python bench/record_agents.py --opencode PATH/opencode --aider PATH/aider

Each agent runs for real (its own prompts, tool schemas, tool execution and history handling)
against the provider simulator, whose scripted model plays a developer's session: OpenCode
explores a copy of this repository's `compression/` package and README with its `bash` tool over
three user requests (`opencode run`, then `opencode run --continue`); aider edits a small module
in its `whole` edit format over four requests read from standard input. The transcript is the
last chat request the agent sent (every earlier turn is in it) plus the scripted model's answer
to it, in OpenAI chat format; the simulator is the model, so the assistant turns are scripted
while everything else is the agent's own.

Neither agent is a dependency of ctxgate: install them in a temporary folder
(`npm install opencode-ai`, `pip install aider-chat` in a venv) and pass their paths.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `tests` importable
    sys.path.insert(0, str(REPO))

from tests.simulator import ModelSpec, Reply, Simulator  # noqa: E402

Body = dict[str, Any]
OUT = REPO / "tests" / "data" / "corpus"
MODEL = "gpt-4o"

# OpenCode: one list of shell commands per user request, run in a copy of the repository.
OPENCODE_TASKS: list[tuple[str, list[str]]] = [
    (
        "Find where the compressor decides which messages to keep verbatim, and explain the rule.",
        [
            "ls",
            "ls compression && wc -l compression/*.py | tail -1",
            "grep -n 'def \\|^class ' compression/engine.py | head -40",
            "sed -n 1,60p compression/assembly/planning.py",
            "grep -rn 'keep' compression/assembly/planning.py compression/summary/middle.py"
            " | head -30",
            "sed -n 1,60p compression/summary/middle.py",
            "sed -n 60,160p compression/assembly/planning.py",
            "grep -n 'tail\\|head' compression/assembly/planning.py | head -30",
            "sed -n 1,120p compression/compressor.py",
        ],
    ),
    (
        "Now look at how archived originals are named (handles) and where they are parsed.",
        [
            "sed -n 1,70p compression/summary/handles.py",
            "grep -rn 'parse_handles\\|archive_line\\|rewritten_suffix' . | head -20",
            'python3 -c "import compression.summary.handles as h; print(h.ranges([2,3,4,5,9]))"',
            "grep -n 'def ' compression/assembly/invariants.py | head -20",
            "sed -n 1,50p compression/assembly/invariants.py",
            "sed -n 1,120p compression/pruning/oneliners.py",
            "sed -n 1,100p compression/pruning/passes.py",
            "grep -rn 'archived' compression/*.py | head -30",
        ],
    ),
    (
        "How is a summary requested and checked? Read the summary modules.",
        [
            "ls compression | grep -i summ",
            "sed -n 1,120p compression/summary/call.py",
            "sed -n 1,100p compression/summary/records.py",
            "grep -n 'def ' compression/summary/handoff.py",
            "sed -n 1,90p compression/summary/handoff.py",
            "sed -n 1,80p compression/summary/prompts.py",
            "grep -rn 'finish_reason\\|length' compression/summary/call.py | head",
            "sed -n 1,80p compression/summary/fallback.py",
        ],
    ),
    (
        "Last: list the development commands the README gives, and where tests should run.",
        [
            "grep -n '^## ' README.md",
            "sed -n '/^## Development/,$p' README.md | head -60",
            "grep -n 'pytest\\|ruff\\|mypy' README.md | head -20",
        ],
    ),
]
OPENCODE_TITLE = "Reading ctxgate's compression package"

# aider: one whole-file answer per user request (`--edit-format whole`).
AIDER_START = "def add(a, b):\n    return a + b\n"
AIDER_TASKS: list[tuple[str, str]] = [
    (
        "Add a subtract function to calc.py.",
        "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n",
    ),
    (
        "Add multiply and divide; divide must raise ValueError on a zero divisor.",
        "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n\n\n"
        "def multiply(a, b):\n    return a * b\n\n\ndef divide(a, b):\n    if b == 0:\n"
        '        raise ValueError("division by zero")\n    return a / b\n',
    ),
    (
        "Give every function a one-line docstring.",
        '"""Small arithmetic helpers."""\n\n\ndef add(a, b):\n    """a plus b."""\n'
        '    return a + b\n\n\ndef subtract(a, b):\n    """a minus b."""\n    return a - b\n\n\n'
        'def multiply(a, b):\n    """a times b."""\n    return a * b\n\n\ndef divide(a, b):\n'
        '    """a divided by b; ValueError when b is zero."""\n    if b == 0:\n'
        '        raise ValueError("division by zero")\n    return a / b\n',
    ),
    (
        "Add type hints (floats) to every function.",
        '"""Small arithmetic helpers."""\n\n\ndef add(a: float, b: float) -> float:\n'
        '    """a plus b."""\n    return a + b\n\n\ndef subtract(a: float, b: float) -> float:\n'
        '    """a minus b."""\n    return a - b\n\n\ndef multiply(a: float, b: float) -> float:\n'
        '    """a times b."""\n    return a * b\n\n\ndef divide(a: float, b: float) -> float:\n'
        '    """a divided by b; ValueError when b is zero."""\n    if b == 0:\n'
        '        raise ValueError("division by zero")\n    return a / b\n',
    ),
]


def _users(body: Body) -> list[str]:
    texts = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            texts.append(str(content or ""))
    return texts


def _since_last_user(body: Body) -> list[dict[str, Any]]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return messages[last + 1 :]


def opencode_model(body: Body) -> Reply:
    """The developer's side of the OpenCode session: the commands of the current request one
    by one (its index is the number of tasks named in the user turns), then a short answer."""
    if not body.get("tools"):
        return Reply(content=OPENCODE_TITLE)  # OpenCode's title request
    asked = [t for t in _users(body) if any(task in t for task, _ in OPENCODE_TASKS)]
    index = min(len(asked), len(OPENCODE_TASKS)) - 1
    task, commands = OPENCODE_TASKS[max(index, 0)]
    done = sum(1 for m in _since_last_user(body) if m.get("role") == "tool")
    if done >= len(commands):
        return Reply(content=f"Done with: {task} I ran {len(commands)} commands; see above.")
    call = {
        "id": f"call_oc{index + 1}s{done + 1}",
        "name": "bash",
        "arguments": {"command": commands[done], "description": f"Step {done + 1}"},
    }
    return Reply(tool_calls=[call])


def aider_model(body: Body) -> Reply:
    """The developer's side of the aider session: the whole new calc.py for each request."""
    users = _users(body)
    asked = [i for i, (task, _) in enumerate(AIDER_TASKS) if any(task in u for u in users)]
    if not asked:
        return Reply(content="ok")  # aider's own side requests (a weak-model summary, …)
    code = AIDER_TASKS[max(asked)][1]
    return Reply(content=f"Here is the updated file.\n\ncalc.py\n```python\n{code}```\n")


@dataclass(frozen=True)
class Run:
    name: str
    model: Callable[[Body], Reply]
    commands: Callable[[str, str], list[tuple[list[str], str | None]]]  # (argv, stdin)
    prepare: Callable[[Path], None]


def _prepare_repo(folder: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "HEAD", "compression", "README.md"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)


def _prepare_calc(folder: Path) -> None:
    (folder / "calc.py").write_text(AIDER_START)


def _opencode_commands(binary: str, base_url: str) -> list[tuple[list[str], str | None]]:
    runs = []
    for n, (task, _) in enumerate(OPENCODE_TASKS):
        argv = [binary, "run", "--model", f"sim/{MODEL}", *(["--continue"] if n else []), task]
        runs.append((argv, None))
    return runs


def _aider_commands(binary: str, base_url: str) -> list[tuple[list[str], str | None]]:
    argv = [
        binary,
        "--model",
        f"openai/{MODEL}",
        "--openai-api-base",
        base_url,
        "--edit-format",
        "whole",
        "--no-git",
        "--yes-always",
        "--no-pretty",
        "--no-stream",
        "--no-check-update",
        "--analytics-disable",
        "--no-show-model-warnings",
        "--no-fancy-input",
        "calc.py",
    ]
    return [(argv, "".join(f"{task}\n" for task, _ in AIDER_TASKS))]


def _opencode_config(folder: Path, base_url: str) -> None:
    config = {
        "provider": {
            "sim": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Simulator",
                "options": {"baseURL": base_url, "apiKey": "sk-sim"},
                "models": {MODEL: {"name": MODEL}},
            }
        },
        "model": f"sim/{MODEL}",
        "autoupdate": False,
        "share": "disabled",
    }
    (folder / "opencode.json").write_text(json.dumps(config, indent=1))


def record(name: str, binary: str, version: str) -> dict[str, Any]:
    """Run one agent against the simulator; its final conversation as a corpus row."""
    model, commands, prepare = (
        (opencode_model, _opencode_commands, _prepare_repo)
        if name == "opencode"
        else (aider_model, _aider_commands, _prepare_calc)
    )
    with (
        tempfile.TemporaryDirectory(prefix=f"record-{name}-") as tmp,
        Simulator(
            models={MODEL: ModelSpec(window=128_000)}, default=ModelSpec(window=128_000)
        ) as sim,
    ):
        work = Path(tmp) / "work"
        home = Path(tmp) / "home"
        work.mkdir()
        home.mkdir()
        prepare(work)
        if name == "opencode":
            _opencode_config(work, sim.base_url)
        sim.responder = model
        env = {
            **os.environ,
            "HOME": str(home),
            "PWD": str(work),  # OpenCode takes its project folder from PWD, not the cwd
            "OPENAI_API_KEY": "sk-sim",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        for argv, stdin in commands(binary, sim.base_url):
            done = subprocess.run(
                argv, cwd=work, env=env, input=stdin, text=True, capture_output=True, timeout=300
            )
            if done.returncode != 0:
                raise RuntimeError(f"{argv[:3]} exited {done.returncode}:\n{done.stderr[-3000:]}")
        bodies = [r.body for r in sim.chat_requests if isinstance(r.body, dict)]
    final = max(bodies, key=lambda b: len(b.get("messages") or []))
    answer = model(final)
    messages = [*final["messages"], {"role": "assistant", "content": answer.content}]
    return {
        "id": f"{name}-{version}-sim",
        "source": f"{name} {version}, recorded with bench/record_agents.py",
        "license": "MIT" if name == "opencode" else "Apache-2.0",
        "agent": name,
        "agent_version": version,
        "requests": len(bodies),
        "tools": final.get("tools"),
        "messages": messages,
    }


def _version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip().split()[-1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opencode", help="path of the opencode binary")
    parser.add_argument("--aider", help="path of the aider command")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for name in ("opencode", "aider"):
        binary = getattr(args, name)
        if not binary:
            continue
        row = record(name, binary, _version(binary))
        path = args.out / f"agents_{name}.jsonl"
        path.write_text(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{path}: {len(row['messages'])} messages from {row['requests']} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
