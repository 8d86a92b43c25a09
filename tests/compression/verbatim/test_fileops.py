"""File reads and edits, recognised per agent from real-shaped transcripts."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.messages.types import Message
from compression.verbatim.fileops import TOOL_RULES, FileOp, file_ops, normal_path
from tests.compression.builders import CORPUS, corpus_conversations

Op = tuple[str, str, bool]  # (kind, path, whole)

MISSING_COLON = "#!/usr/bin/env python3\n\n\ndef division(a: float, b: float) -> float\n"
PATCH = (
    "*** Begin Patch\n*** Update File: src/app.py\n@@ def main():\n-    return 1\n+    return 2\n"
    "*** Add File: src/new.py\n+VALUE = 1\n*** Delete File: old.py\n*** End Patch"
)
SWE_VIEW = (
    "[File: src/marshmallow/fields.py (1997 lines total)]\n(1456 more lines above)\n"
    "1457:            self.MINUTES,\n(440 more lines below)\n"
    "(Open file: /testbed/src/marshmallow/fields.py)\n(Current directory: /testbed)\nbash-$"
)
SWE_SMALL = (
    "[File: /SWE-agent__test-repo/tests/missing_colon.py (10 lines total)]\n1:#!/usr/bin/env"
    " python3\n(Open file: /SWE-agent__test-repo/tests/missing_colon.py)\nbash-$"
)


def called(name: str, arguments: Any, output: str | None = "ok") -> list[Message]:
    """One assistant tool call and, unless None, its result (arguments: a dict or raw text)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    ask: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": raw}}
        ],
    }
    if output is None:
        return [ask]
    return [ask, {"role": "tool", "tool_call_id": "call_1", "content": output}]


def acted(
    text: str, output: str | None = "<returncode>0</returncode>\n<output>\n</output>"
) -> list[Message]:
    """A text-action turn and, unless None, its observation as a `user` message."""
    turn: list[Message] = [{"role": "assistant", "content": text}]
    return turn + ([{"role": "user", "content": output}] if output is not None else [])


def found(*turns: list[Message]) -> list[Op]:
    messages: list[Message] = [{"role": "user", "content": "Fix the bug."}]
    for turn in turns:
        messages.extend(turn)
    return [(op.kind, op.path, op.whole) for op in file_ops(messages)]


def bash_lc(script: str) -> dict[str, Any]:
    return {"command": ["bash", "-lc", script], "workdir": "/repo"}


CASES: dict[str, tuple[list[list[Message]], list[Op]]] = {
    # Codex: shell (argv list or string), exec_command, local_shell, apply_patch
    "codex cat": ([called("shell", bash_lc("cat src/app.py"))], [("read", "src/app.py", True)]),
    "codex sed range": (
        [called("shell", bash_lc("sed -n '10,40p' src/app.py"))],
        [("read", "src/app.py", False)],
    ),
    "codex nl into sed": (
        [called("shell", bash_lc("nl -ba src/app.py | sed -n '1,200p'"))],
        [("read", "src/app.py", False)],
    ),
    "codex nl": ([called("shell", bash_lc("nl -ba src/app.py"))], [("read", "src/app.py", True)]),
    "codex head and tail": (
        [called("shell", bash_lc("head -n 50 a.py && tail -20 b.py"))],
        [("read", "a.py", False), ("read", "b.py", False)],
    ),
    "codex exec_command": (
        [called("exec_command", {"cmd": "cat README.md", "yield_time_ms": 1000})],
        [("read", "README.md", True)],
    ),
    "codex argv without a shell": (
        [called("shell", {"command": ["cat", "./src/app.py"]})],
        [("read", "src/app.py", True)],
    ),
    "codex local_shell": (
        [called("local_shell_call", {"action": {"type": "exec", "command": ["cat", "a.py"]}})],
        [("read", "a.py", True)],
    ),
    "codex apply_patch custom tool": (
        [called("apply_patch", PATCH)],
        [("edit", "src/app.py", False), ("edit", "src/new.py", True), ("edit", "old.py", True)],
    ),
    "codex apply_patch function": (
        [called("apply_patch", {"input": PATCH})],
        [("edit", "src/app.py", False), ("edit", "src/new.py", True), ("edit", "old.py", True)],
    ),
    "codex apply_patch heredoc": (
        [called("shell", bash_lc(f"apply_patch <<'EOF'\n{PATCH}\nEOF\n"))],
        [("edit", "src/app.py", False), ("edit", "src/new.py", True), ("edit", "old.py", True)],
    ),
    "codex apply_patch argv": (
        [called("shell", {"command": ["apply_patch", PATCH]})],
        [("edit", "src/app.py", False), ("edit", "src/new.py", True), ("edit", "old.py", True)],
    ),
    # Claude Code
    "claude Read": ([called("Read", {"file_path": "/repo/a.py"})], [("read", "/repo/a.py", True)]),
    "claude Read range": (
        [called("Read", {"file_path": "/repo/a.py", "offset": 120, "limit": 40})],
        [("read", "/repo/a.py", False)],
    ),
    "claude Edit, MultiEdit, Write": (
        [
            called("Edit", {"file_path": "/repo/a.py", "old_string": "x", "new_string": "y"}),
            called("MultiEdit", {"file_path": "/repo/a.py", "edits": [{"old_string": "y"}]}),
            called("Write", {"file_path": "/repo/b.py", "content": "print(1)\n"}),
        ],
        [
            ("edit", "/repo/a.py", False),
            ("edit", "/repo/a.py", False),
            ("edit", "/repo/b.py", True),
        ],
    ),
    "claude Bash": ([called("Bash", {"command": "cat -n a.py"})], [("read", "a.py", True)]),
    # OpenCode
    "opencode read, edit, write": (
        [
            called("read", {"filePath": "/repo/a.py"}),
            called("read", {"filePath": "/repo/a.py", "offset": 200, "limit": 50}),
            called("edit", {"filePath": "/repo/a.py", "oldString": "x", "newString": "y"}),
            called("write", {"filePath": "/repo/b.py", "content": "x = 1\n"}),
        ],
        [
            ("read", "/repo/a.py", True),
            ("read", "/repo/a.py", False),
            ("edit", "/repo/a.py", False),
            ("edit", "/repo/b.py", True),
        ],
    ),
    "opencode bash": (
        [
            called(
                "bash",
                {"command": "sed -n 1,60p compression/assembly/planning.py", "description": "s"},
            )
        ],
        [("read", "compression/assembly/planning.py", False)],
    ),
    # Gemini CLI
    "gemini read_file": (
        [
            called("read_file", {"absolute_path": "/repo/a.py"}),
            called("read_file", {"file_path": "/repo/a.py", "offset": 10, "limit": 20}),
        ],
        [("read", "/repo/a.py", True), ("read", "/repo/a.py", False)],
    ),
    "gemini read_many_files": (
        [called("read_many_files", {"paths": ["a.py", "docs/b.md", "src/**/*.py"]})],
        [("read", "a.py", True), ("read", "docs/b.md", True)],
    ),
    "gemini replace, write_file, shell": (
        [
            called("replace", {"file_path": "/r/a.py", "old_string": "x", "new_string": "y"}),
            called("write_file", {"file_path": "/r/b.py", "content": "x"}),
            called("run_shell_command", {"command": "cat /r/c.py"}),
        ],
        [("edit", "/r/a.py", False), ("edit", "/r/b.py", True), ("read", "/r/c.py", True)],
    ),
    # SWE-agent function calling: edit and insert act on the open file
    "swe-agent fc open, edit": (
        [
            called("open", {"path": "tests/missing_colon.py"}, SWE_SMALL),
            called("edit", {"search": "-> float", "replace": "-> float:"}),
        ],
        [("read", "tests/missing_colon.py", True), ("edit", "tests/missing_colon.py", False)],
    ),
    "swe-agent fc open a window": (
        [called("open", {"path": "src/marshmallow/fields.py", "line_number": 1474}, SWE_VIEW)],
        [("read", "src/marshmallow/fields.py", False)],
    ),
    "swe-agent fc create, insert, scroll": (
        [
            called("create", {"filename": "reproduce.py"}),
            called("insert", {"text": "print(1)"}),
            called("scroll_down", {}),
        ],
        [
            ("edit", "reproduce.py", True),
            ("edit", "reproduce.py", False),
            ("read", "reproduce.py", False),
        ],
    ),
    "swe-agent str_replace_editor": (
        [
            called("str_replace_editor", {"command": "view", "path": "/testbed/a.py"}),
            called(
                "str_replace_editor", {"command": "view", "path": "/t/a.py", "view_range": [1, 9]}
            ),
            called("str_replace_editor", {"command": "str_replace", "path": "/t/a.py"}),
            called("str_replace_editor", {"command": "create", "path": "/t/b.py"}),
        ],
        [
            ("read", "/testbed/a.py", True),
            ("read", "/t/a.py", False),
            ("edit", "/t/a.py", False),
            ("edit", "/t/b.py", True),
        ],
    ),
    # Text actions: SWE-agent (fenced block, or <command>) and mini-swe-agent
    "swe-agent text open, edit": (
        [
            acted("Let's look.\n```\nopen tests/missing_colon.py\n```", SWE_SMALL),
            acted("Fix it.\n```\nedit 4:4\ndef division(a, b):\nend_of_edit\n```", SWE_SMALL),
        ],
        [("read", "tests/missing_colon.py", True), ("edit", "tests/missing_colon.py", False)],
    ),
    "swe-agent text create, goto": (
        [acted("```\ncreate reproduce.py\n```"), acted("```\ngoto 20\n```")],
        [("edit", "reproduce.py", True), ("read", "reproduce.py", False)],
    ),
    "swe-agent xml command": (
        [acted("Navigate.\n<command>\nopen src/marshmallow/fields.py 1474\n</command>", SWE_VIEW)],
        [("read", "src/marshmallow/fields.py", False)],
    ),
    "mini-swe-agent cat, sed -i": (
        [
            acted("```mswea_bash_command\ncat tests/./missing_colon.py\n```", MISSING_COLON),
            acted("```mswea_bash_command\nsed -i 's/float/float:/' tests/missing_colon.py\n```"),
        ],
        [("read", "tests/missing_colon.py", True), ("edit", "tests/missing_colon.py", False)],
    ),
    "mini-swe-agent cat heredoc write": (
        [acted("```mswea_bash_command\ncat > t/m.py << 'EOF'\nimport os\ncat x\nEOF\n```")],
        [("edit", "t/m.py", True)],
    ),
    # What is not a read or an edit
    "filtered, redirected, python heredoc": (
        [
            called("bash", {"command": "cat a.py | grep def; cat a.py 2>&1 > b.txt"}),
            acted("```bash\npython - <<'EOF'\nopen('a.py', 'w').write('x')\nEOF\n```"),
            acted("The fix:\n```python\ncat = open('a.py')\n```"),
        ],
        [("edit", "b.txt", True)],
    ),
    "echo append and tee": (
        [called("bash", {"command": "echo x >> notes.txt && echo y | tee out.txt"})],
        [("edit", "notes.txt", False), ("edit", "out.txt", True)],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reads_and_edits_per_agent(name: str) -> None:
    turns, expected = CASES[name]
    assert found(*turns) == expected


def test_ops_name_the_call_and_its_result() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Fix it."},
        *called("Read", {"file_path": "a.py"}),
        *acted("```\ncat b.py\n```", "text"),
        *called("Edit", {"file_path": "a.py"}, output=None),
    ]
    assert file_ops(messages) == [
        FileOp("read", "a.py", 1, 2, True, "Read"),
        FileOp("read", "b.py", 3, 4, True, "cat"),
        FileOp("edit", "a.py", 5, None, False, "Edit"),
    ]


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ("./src/a.py", "src/a.py"),
        ("src/./a.py", "src/a.py"),
        ("/repo//src/a.py", "/repo/src/a.py"),
        ("a.py,", "a.py"),
        ("`a.py`.", "a.py"),
        ("../a.py", "../a.py"),
        ("src/*.py", None),
        ("$FILE", None),
        ("/dev/null", None),
        ("-", None),
        ("", None),
    ],
)
def test_paths_are_normalised_not_resolved(raw: str, path: str | None) -> None:
    assert normal_path(raw) == path


# --- properties ---------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "cat a.py",
        "sed -n '1,9p' b.py",
        "sed -i 's/x/y/'",
        "nl -ba",
        "| head",
        "> out",
        "<<'EOF'",
        "EOF",
        "```",
        "```bash\n",
        "<command>",
        "</command>",
        "open",
        "edit 1:2",
        "*** Update File: x.py",
        "*** Begin Patch",
        '"',
        "'",
        "\n",
        "&&",
        "2>&1",
        "\\",
    ]
)
TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=8).map(" ".join)
NAMES = st.sampled_from([*TOOL_RULES, "shell", "bash", "apply_patch", "read_many_files", "x"])
ARGS = st.one_of(
    st.dictionaries(
        st.sampled_from(["command", "cmd", "path", "file_path", "filePath", "paths", "offset"]),
        st.one_of(TEXT, st.lists(TEXT, max_size=3), st.integers(), st.none()),
        max_size=3,
    ).map(json.dumps),
    TEXT,
)
IDS = st.sampled_from(["c1", "c2", "c3"])


@st.composite
def messages(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    for _ in range(draw(st.integers(0, 12))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool", "function"]))
        message: dict[str, Any] = {"role": role, "content": draw(st.one_of(TEXT, st.none()))}
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = [
                {"id": draw(IDS), "type": "function", "function": {"name": n, "arguments": a}}
                for n, a in draw(st.lists(st.tuples(NAMES, ARGS), max_size=3))
            ]
        if role == "tool":
            message["tool_call_id"] = draw(IDS)
        out.append(message)  # type: ignore[arg-type]
    return out


@settings(max_examples=300, deadline=None)
@given(messages())
def test_never_raises_and_indexes_are_in_order(history: list[Message]) -> None:
    ops = file_ops(history)
    assert [op.call for op in ops] == sorted(op.call for op in ops)
    for op in ops:
        assert 0 <= op.call < len(history)
        assert history[op.call].get("role") == "assistant"
        assert op.result is None or op.call < op.result < len(history)
        assert op.kind in ("read", "edit") and op.path


# --- the recorded transcripts -------------------------------------------------------------------


@pytest.mark.skipif(not CORPUS.exists(), reason="the shared corpus is not present")
def test_coding_transcripts_read_before_they_edit() -> None:
    counts: Counter[str] = Counter()
    for name, history in corpus_conversations():
        agent = name.split("::")[0] if "::" in name else name.split("-")[0].split("_")[0]
        read: set[str] = set()
        written: set[str] = set()
        for op in file_ops(history):
            counts[f"{agent} {op.kind}s"] += 1
            if op.kind == "read":
                read.add(op.path)
                continue
            counts[f"{agent} edits after a read"] += op.path in read
            if not op.whole and op.path not in written:  # needs old text it did not write
                counts["edits of files not created"] += 1
                counts["of which read before"] += op.path in read
            written |= {op.path} if op.whole else set()
    print(dict(sorted(counts.items())))
    assert counts["sweagent reads"] >= 15 and counts["sweagent edits"] >= 40
    assert counts["mini reads"] >= 2 and counts["mini edits"] >= 2
    assert counts["opencode reads"] >= 10
    assert counts["tau reads"] + counts["tau edits"] == 0  # a chat service touches no files
    assert counts["edits of files not created"] >= 20
    assert counts["of which read before"] >= 0.8 * counts["edits of files not created"]
