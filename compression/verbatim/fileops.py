"""FINAL: the interface (FileOp, file_ops, TOOL_RULES, normal_path) is stable and tested.

Which messages read a file and which edit one, for any coding agent (pure).

Coding agents edit what they read earlier, and an edit's old text must match the file: a read
pruned to a one-liner leaves the model to rebuild the file from memory. This module finds the
reads and edits so that the compressor can keep the newest full read of each file verbatim.

Recognition is by tool name and arguments, from a table (`TOOL_RULES`, one row per tool, names
matched case-insensitively) covering Claude Code, OpenCode, Gemini CLI and SWE-agent's
function-calling tools; shell tools (Codex, OpenCode, Claude Code, Gemini CLI, SWE-agent) are
read by their command line (`cat`, `nl`, `sed -n`, `head`, `tail`; `sed -i`, `cat > file`,
`tee`, `apply_patch` heredocs); Codex's `apply_patch` by its patch's file lines. Text-action
agents (SWE-agent, mini-swe-agent) write the command in the assistant's text, in the last
fenced block or a `<command>` tag, and get its output back as the next `user` message.

An op's `whole` says, for a read, that it showed the whole file (not a line range or a viewer
window); for an edit, that it wrote the whole file (create, Write), so it needed no old text.
Paths are normalised (no `./`, no trailing punctuation) but never resolved: `src/a.py` and
`/repo/src/a.py` stay different files.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from compression.messages.content import content_text
from compression.messages.toolpairs import call_parts, pair_tool_calls, tool_calls_of
from compression.messages.types import Message, ToolCall

Kind = Literal["read", "edit"]


@dataclass(frozen=True, slots=True)
class FileOp:
    kind: Kind  # a write or create counts as an edit
    path: str
    call: int  # the assistant message that asked (tool call or text action)
    result: int | None  # the tool message or observation that answered; None if none yet
    whole: bool = True  # read: the whole file was shown; edit: the whole file was written
    tool: str = ""  # the tool or command that did it ("Read", "sed", "open", "apply_patch")


@dataclass(frozen=True, slots=True)
class ToolRule:
    """How one file tool names its file; add a row to recognise another agent's tool."""

    kind: Kind
    path_keys: tuple[str, ...]  # the first present names the file
    partial_keys: tuple[str, ...] = ()  # a read given any of these shows a range
    whole: bool = True  # read: shows the whole file; edit: writes it whole
    open_file: bool = False  # without a path it acts on SWE-agent's open file
    opens: bool = False  # its file becomes SWE-agent's open file
    viewer: bool = False  # its result is a window; "(N more lines above)" makes it partial


@dataclass(frozen=True, slots=True)
class _Found:  # what one call did to one file, before it is placed in the conversation
    kind: Kind
    path: str
    whole: bool
    tool: str
    opens: bool = False


_PATH = ("file_path", "filePath", "absolute_path", "path", "filename", "file")
_RANGE = ("offset", "limit", "start_line", "end_line", "view_range", "pages")
TOOL_RULES: Mapping[str, ToolRule] = {
    # Claude Code (Read, Edit, MultiEdit, Write, NotebookEdit); OpenCode (read, edit, write)
    "read": ToolRule("read", _PATH, _RANGE),
    "edit": ToolRule("edit", _PATH, whole=False, open_file=True),  # SWE-agent: the open file
    "multiedit": ToolRule("edit", _PATH, whole=False),
    "write": ToolRule("edit", _PATH),
    "notebookedit": ToolRule("edit", ("notebook_path",), whole=False),
    # Gemini CLI (read_file, replace, write_file; read_many_files is handled below)
    "read_file": ToolRule("read", _PATH, _RANGE),
    "replace": ToolRule("edit", _PATH, whole=False),
    "write_file": ToolRule("edit", _PATH),
    # SWE-agent function calling (str_replace_editor is handled below)
    "open": ToolRule("read", _PATH, ("line_number",), opens=True, viewer=True),
    "create": ToolRule("edit", _PATH, opens=True),
    "insert": ToolRule("edit", _PATH, whole=False, open_file=True),
    "goto": ToolRule("read", (), whole=False, open_file=True),
    "scroll_up": ToolRule("read", (), whole=False, open_file=True),
    "scroll_down": ToolRule("read", (), whole=False, open_file=True),
}
SHELL_TOOLS = frozenset(
    {"shell", "local_shell", "local_shell_call", "exec_command", "container.exec", "bash"}
    | {"run_shell_command", "execute_bash"}
)
PATCH_TOOLS = frozenset({"apply_patch", "applypatch", "patch"})
_ACTION_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "mswea_bash_command"})
_FENCE = re.compile(r"^```([\w-]*)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_TAG = re.compile(r"<(command|execute_bash|bash)>(.*?)</\1>", re.DOTALL)
_WINDOW = re.compile(r"\(\d+ more lines? (?:above|below)\)")
_PATCH_LINE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([\w.-]+)\1")


def file_ops(messages: Sequence[Message]) -> list[FileOp]:
    """Every recognised file read and edit, in message order."""
    pairing = pair_tool_calls(messages)
    answers = {place: index for index, place in pairing.owner.items()}
    ops: list[FileOp] = []
    opened: str | None = None  # SWE-agent's open file, which its edits change
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for found, result in _asked(messages, index, answers):
            for one in found(opened, _result_text(messages, result)):
                ops.append(FileOp(one.kind, one.path, index, result, one.whole, one.tool))
                opened = one.path if one.opens else opened
    return ops


# What one call found, given SWE-agent's open file and the result's text.
Finder = Callable[[str | None, str], list[_Found]]


def _asked(
    messages: Sequence[Message], index: int, answers: Mapping[tuple[int, int], int]
) -> Iterator[tuple[Finder, int | None]]:
    message = messages[index]
    calls = tool_calls_of(message)
    for position, call in enumerate(calls):
        yield _call_finder(call), answers.get((index, position))
    if calls:
        return
    action = _action(content_text(message))
    if action is not None:
        following = index + 1 < len(messages) and messages[index + 1].get("role") == "user"
        yield _text_finder(action), index + 1 if following else None


def _result_text(messages: Sequence[Message], result: int | None) -> str:
    return content_text(messages[result]) if result is not None else ""


# --- tool calls ---------------------------------------------------------------------------------


def _call_finder(call: ToolCall) -> Finder:
    name, raw = call_parts(call)
    tool = (name or "").strip()
    args = _arguments(raw)

    def find(opened: str | None, result: str) -> list[_Found]:
        return list(_from_tool(tool, args, raw or "", opened, result))

    return find


def _arguments(raw: str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _from_tool(
    tool: str, args: dict[str, Any], raw: str, opened: str | None, result: str
) -> Iterator[_Found]:
    key = tool.lower()
    if key in SHELL_TOOLS:
        yield from shell_ops(_command(args))
    elif key in PATCH_TOOLS:
        text = next((v for v in args.values() if isinstance(v, str) and "***" in v), raw)
        yield from patch_ops(text)
    elif key == "read_many_files":
        paths = args.get("paths")
        for item in paths if isinstance(paths, list) else []:
            yield from _found("read", item, True, tool)
    elif key == "str_replace_editor":
        yield from _editor(args, tool)
    elif key in TOOL_RULES:
        yield from _by_rule(TOOL_RULES[key], tool, args, opened, result)


def _command(args: dict[str, Any]) -> str:
    action = args.get("action")
    source = action if isinstance(action, dict) else args
    command = source.get("command", source.get("cmd"))
    if isinstance(command, str):
        return command
    if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
        return ""
    shell = _base(command[0]) in ("bash", "sh", "zsh", "dash") if command else False
    if shell and len(command) >= 3 and command[-2].startswith("-") and "c" in command[-2]:
        return str(command[-1])  # ["bash", "-lc", "script"]
    if len(command) == 2 and _base(command[0]) in PATCH_TOOLS:
        return str(command[1])  # ["apply_patch", "*** Begin Patch ..."]
    return shlex.join(command)


def _by_rule(
    rule: ToolRule, tool: str, args: dict[str, Any], opened: str | None, result: str
) -> Iterator[_Found]:
    path = next((args[k] for k in rule.path_keys if isinstance(args.get(k), str)), None)
    if path is None and rule.open_file:
        path = opened
    whole = rule.whole and not any(args.get(k) not in (None, 0, 1) for k in rule.partial_keys)
    if rule.viewer and result:
        whole = _WINDOW.search(result) is None
    yield from _found(rule.kind, path, whole, tool, rule.opens)


def _editor(args: dict[str, Any], tool: str) -> Iterator[_Found]:
    command, path = args.get("command"), args.get("path")
    if command == "view":
        yield from _found("read", path, args.get("view_range") is None, tool)
    elif command in ("create", "str_replace", "insert", "undo_edit"):
        yield from _found("edit", path, command == "create", tool)


def _found(
    kind: Kind, raw: object, whole: bool, tool: str, opens: bool = False
) -> Iterator[_Found]:
    path = normal_path(raw) if isinstance(raw, str) else None
    if path is not None:
        yield _Found(kind, path, whole, tool, opens)


def normal_path(raw: str) -> str | None:
    """The path as sent, without quotes, `./` segments or trailing punctuation; None if it
    names no single file (empty, a glob, a variable, a device)."""
    path, before = raw.strip(), ""
    while path != before:  # `a.py`. or "a.py", peel quotes and punctuation in any order
        before = path
        path = path.strip("'\"`").rstrip(",;:)")
        path = path[:-1] if path.endswith(".") and not path.endswith("..") else path
    if not path or any(mark in path for mark in "*?[]{}$<>|\n") or path.startswith("/dev/"):
        return None
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or parts == [".."] or path == "-":
        return None
    return ("/" if path.startswith("/") else "") + "/".join(parts)


# --- patches ------------------------------------------------------------------------------------


def patch_ops(text: str) -> Iterator[_Found]:
    """Files a Codex patch (`*** Begin Patch` … `*** End Patch`) changes; an added or
    moved-to file is written whole."""
    for line in text.splitlines():
        match = _PATCH_LINE.match(line.strip())
        if match is None:
            continue
        verb, path, moved = match.groups()
        whole = verb != "Update"
        yield from _found("edit", path if path is not None else moved, whole, "apply_patch")


# --- text actions -------------------------------------------------------------------------------


def _action(text: str) -> str | None:
    """The command of a text-action turn: the last `<command>` tag, else the last fenced
    block when it is shell-like (a ```python block is code shown, not run)."""
    tags = _TAG.findall(text)
    if tags:
        return str(tags[-1][1]).strip()
    blocks = _FENCE.findall(text)
    if not blocks or blocks[-1][0] not in _ACTION_LANGUAGES:
        return None
    return str(blocks[-1][1]).strip()


_VIEWER_COMMANDS = {"open": ("path", "line_number"), "create": ("filename",)}
_OPEN_FILE_COMMANDS = frozenset({"edit", "insert", "goto", "scroll_up", "scroll_down"})


def _text_finder(action: str) -> Finder:
    first = action.split("\n", 1)[0]
    words = _words(first)
    command = words[0] if words else ""

    def find(opened: str | None, result: str) -> list[_Found]:
        if command in _VIEWER_COMMANDS:
            args = dict(zip(_VIEWER_COMMANDS[command], words[1:], strict=False))
            return list(_by_rule(TOOL_RULES[command], command, args, opened, result))
        if command in _OPEN_FILE_COMMANDS:
            return list(_by_rule(TOOL_RULES[command], command, {}, opened, result))
        return list(shell_ops(action))

    return find


# --- shell commands -----------------------------------------------------------------------------


def shell_ops(script: str) -> Iterator[_Found]:
    """Reads and edits a shell script makes with the commands this module knows."""
    if "*** Begin Patch" in script:
        yield from patch_ops(script)
        return
    for line, body in _command_lines(script):
        segments = _segments(_words(line))
        for position, (words, piped) in enumerate(segments):
            into = segments[position + 1][0][:1] if piped and position + 1 < len(segments) else []
            yield from _simple(words, piped, _base(into[0]) if into else "", body)


def _command_lines(script: str) -> Iterator[tuple[str, str]]:
    """Each line of a script with the heredoc body it feeds ("" when none)."""
    lines = script.replace("\\\n", " ").splitlines()
    index = 0
    while index < len(lines):
        line, index = lines[index], index + 1
        match = _HEREDOC.search(line)
        body: list[str] = []
        while match and index < len(lines) and lines[index].strip() != match.group(2):
            body.append(lines[index])
            index += 1
        index += 1 if match else 0
        yield line, "\n".join(body)


def _words(line: str) -> list[str]:
    return list(_lexed(line))


@lru_cache(maxsize=8192)  # every compression of a session reads the same commands again
def _lexed(line: str) -> tuple[str, ...]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return tuple(lexer)
    except ValueError:  # an unclosed quote: a multi-line string this line-wise reading cut
        return ()


def _segments(words: list[str]) -> list[tuple[list[str], bool]]:
    """Simple commands, each with whether its output is piped on."""
    segments: list[tuple[list[str], bool]] = []
    current: list[str] = []
    for word in words:
        if word and set(word) <= set("();|&"):
            segments.append((current, word in ("|", "|&")))
            current = []
        else:
            current.append(word)
    segments.append((current, False))
    return [(words, piped) for words, piped in segments if words]


_PREFIXES = frozenset({"sudo", "command", "time", "exec", "nohup", "env", "then", "do", "{"})
_VALUED = {
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
}


def _simple(words: list[str], piped: bool, into: str, body: str) -> Iterator[_Found]:
    args, outputs = _redirects(words)
    while args and (args[0] in _PREFIXES or re.match(r"^\w+=", args[0])):
        args = args[1:]
    program = _base(args[0]) if args else ""
    for target, append in outputs:
        if program in ("cat", "echo", "printf"):
            yield from _found("edit", target, not append, program)
    if program in PATCH_TOOLS:
        yield from patch_ops(body)
    elif program == "tee":
        yield from _files("edit", args, "-a" not in args, program)
    elif program == "sed":
        yield from _sed(args)
    elif program in ("cat", "nl", "bat", "head", "tail") and not outputs:
        # Piped into anything but a range printer, the output is filtered: no file text.
        if not piped or into in ("head", "tail", "sed"):
            whole = program not in ("head", "tail") and not piped
            yield from _files("read", args, whole, program)


def _redirects(words: list[str]) -> tuple[list[str], list[tuple[str, bool]]]:
    """The words without redirections, and the files output goes to (with append or not)."""
    kept: list[str] = []
    outputs: list[tuple[str, bool]] = []
    index = 0
    while index < len(words):
        word = words[index]
        target = words[index + 1] if index + 1 < len(words) else ""
        if not word.startswith(("<", ">", "&>")):
            kept.append(word)
            index += 1
            continue
        if kept and kept[-1].isdigit():
            kept.pop()  # the fd of `2> file`, which the lexer splits off
        if word in (">", ">>", ">|", "&>", "&>>") and target:
            outputs.append((target, word.endswith(">>")))
        index += 2  # an input, heredoc or fd duplication names no file written
    return kept, outputs


def _files(kind: Kind, args: list[str], whole: bool, tool: str) -> Iterator[_Found]:
    valued = _VALUED.get(tool, frozenset())
    index, options = 1, True
    while index < len(args):
        word = args[index]
        index += 1
        if options and word == "--":
            options = False
        elif options and word.startswith("-") and len(word) > 1:
            index += 1 if word in valued else 0
        else:
            yield from _found(kind, word, whole, tool)


def _sed(args: list[str]) -> Iterator[_Found]:
    scripts: list[str] = []
    operands: list[str] = []
    quiet = in_place = False
    index = 1
    while index < len(args):
        word = args[index]
        index += 1
        if word.startswith("--"):
            in_place |= word.startswith("--in-place")
            quiet |= word in ("--quiet", "--silent")
            if word.startswith("--expression="):
                scripts.append(word.split("=", 1)[1])
        elif word.startswith("-") and len(word) > 1:
            flags = word[1:].split("i", 1)[0]  # -i takes the rest as a backup suffix
            in_place |= "i" in word[1:]
            quiet |= "n" in flags
            if flags.endswith(("e", "f")) and index < len(args):
                scripts.append(args[index])
                index += 1
        else:
            operands.append(word)
    if not scripts and operands:
        scripts.append(operands.pop(0))
    if in_place or (quiet and "p" in "".join(scripts)):  # `sed -n 'a,bp'` prints a range
        kind: Kind = "edit" if in_place else "read"
        for operand in operands:
            yield from _found(kind, operand, False, "sed")


def _base(program: str) -> str:
    return program.rsplit("/", 1)[-1]


def clear_caches() -> None:
    """Forget memoized command readings (benchmarks measuring a cold pass)."""
    _lexed.cache_clear()
