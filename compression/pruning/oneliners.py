"""One informative line standing in for an old tool result.

Built from the originating call (name and arguments) plus facts of the result, so what was
done, to what, and how it ended survive: ``[bash] ran `npm test` -> exit 1, 47 lines;
error: 2 failed; refs: src/app.test.js, TypeError``. Exit codes and the first error line are
always kept, and the first few exact ids, paths and error names the line does not name yet.
"""

from __future__ import annotations

import json
import re
from typing import Any

from compression.messages.content import line_count
from compression.verbatim.anchors import find_anchors

_SHELL = re.compile(r"bash|shell|terminal|command|^exec|run_cmd|execute_bash")
_READ = re.compile(r"read|open|view|cat\b|^get_file|show_file")
_WRITE = re.compile(r"write|create|save|append")
_EDIT = re.compile(r"edit|patch|replace|insert|apply_diff|modify")
_SEARCH = re.compile(r"grep|search_file|find|glob|list_dir|^ls$|search_dir|ripgrep")
_FETCH = re.compile(r"fetch|browse|url|web_extract|scrape|http|navigate")
_WEB_SEARCH = re.compile(r"web_search|search_web|internet_search|google|bing|^search$")

_EXIT_PATTERNS = (
    re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>"),
    re.compile(r"exit(?:ed with)?[ _]?(?:code|status)[\"']?\s*[:=]?\s*(-?\d+)", re.IGNORECASE),
    re.compile(r"returncode[\"']?\s*[:=]\s*(-?\d+)", re.IGNORECASE),
    re.compile(r"\bexit (-?\d+)\b", re.IGNORECASE),
)
_ERROR_WORDS = (
    "error",
    "exception",
    "traceback",
    "failed",
    "failure",
    "fatal",
    "not found",
    "no such file",
    "denied",
    "invalid",
    "cannot",
    "can't",
    "refused",
    "timed out",
    "timeout",
)
_ERROR_LINE = re.compile("|".join(re.escape(word) for word in _ERROR_WORDS), re.IGNORECASE)
ERROR_SCAN_CHARS = 3000  # errors sit at the start or the end of an output (tracebacks, summaries)
MAX_REFS = 4
MAX_REFS_CHARS = 100
REFS_HEAD_CHARS = 800  # a record's ids come first; a command's outcome comes last
REFS_TAIL_CHARS = 300
PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file", "uri", "dir")
_COMMAND_KEYS = ("command", "cmd", "script", "commands", "input", "code")
_LINE_KEYS = ("offset", "line", "start_line", "line_number", "from_line", "view_range")


def describe_result(name: str, arguments: str | None, result: str) -> str:
    """The one-liner for a tool result; unknown tools get ``[name] k=v … (N chars result)``."""
    args = _parse_args(arguments)
    lowered = name.lower()
    command = args.get("command")
    if isinstance(command, str) and command in ("view", "create", "str_replace", "insert"):
        line = _editor(name, command, args, result)
    elif _SHELL.search(lowered) and _first(args, _COMMAND_KEYS):
        line = _shell(name, args, result)
    elif _WEB_SEARCH.search(lowered):
        line = f"[{name}] query={_quote(_first(args, ('query', 'q', 'search_term')))}"
        line += f" ({len(result):,} chars result)"
    elif _SEARCH.search(lowered):
        line = _search(name, args, result)
    elif _FETCH.search(lowered) and _first(args, ("url", "urls", "href", "link")):
        line = f"[{name}] {_short(_first(args, ('url', 'urls', 'href', 'link')), 120)}"
        line += f" ({len(result):,} chars)"
    elif _path(args) and (_READ.search(lowered) or _WRITE.search(lowered) or _EDIT.search(lowered)):
        line = _file(name, lowered, args, result)
    else:
        line = _generic(name, args, result)
    return _with_refs(_with_error(line, result), result)


def _parse_args(arguments: str | None) -> dict[str, Any]:
    if not arguments:
        return {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _first(args: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = args.get(key)
        if value not in (None, "", [], {}):
            return value
    return None


def _path(args: dict[str, Any]) -> str | None:
    value = _first(args, PATH_KEYS)
    return str(value) if value is not None else None


def _short(value: Any, limit: int) -> str:
    if isinstance(value, list):
        more = f" (+{len(value) - 1} more)" if len(value) > 1 else ""
        return _short(value[0], limit) + more if value else "[]"
    if isinstance(value, dict):
        value = value.get("url") or value.get("href") or json.dumps(value, ensure_ascii=False)
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote(value: Any) -> str:
    return "'" + _short(value if value is not None else "", 80) + "'"


def exit_code(result: str) -> str | None:
    for pattern in _EXIT_PATTERNS:
        found = pattern.search(result)
        if found:
            return found.group(1)
    return None


def first_error_line(result: str) -> str | None:
    """The first line that looks like an error, in the head or the tail of a long result."""
    if len(result) > 2 * ERROR_SCAN_CHARS:
        result = result[:ERROR_SCAN_CHARS] + "\n" + result[-ERROR_SCAN_CHARS:]
    lowered = result.lower()
    if len(lowered) == len(result):  # plain str.find is far faster than the regex
        hits = [at for at in (lowered.find(word) for word in _ERROR_WORDS) if at >= 0]
        position = min(hits, default=-1)
    else:
        found = _ERROR_LINE.search(result)
        position = found.start() if found is not None else -1
    if position < 0:
        return None
    start = result.rfind("\n", 0, position) + 1
    end = result.find("\n", position)
    return _short(result[start : end if end >= 0 else len(result)].strip(), 160)


def _shell(name: str, args: dict[str, Any], result: str) -> str:
    command = _short(_first(args, _COMMAND_KEYS), 80)
    code = exit_code(result) or "?"
    return f"[{name}] ran `{command}` -> exit {code}, {line_count(result)} lines output"


def _editor(name: str, command: str, args: dict[str, Any], result: str) -> str:
    path = _path(args) or "?"
    if command == "view":
        return f"[{name}] viewed {path} ({len(result):,} chars)"
    if command == "create":
        text = args.get("file_text")
        lines = line_count(text) if isinstance(text, str) else "?"
        return f"[{name}] created {path} ({lines} lines)"
    return f"[{name}] {command} in {path} ({len(result):,} chars result)"


def _search(name: str, args: dict[str, Any], result: str) -> str:
    pattern = _first(args, ("pattern", "regex", "query", "search_term", "name", "file_name"))
    where = _path(args) or "."
    found = line_count(result)
    return (
        f"[{name}] search for {_quote(pattern)} in {where} -> {found} lines ({len(result):,} chars)"
    )


def _file(name: str, lowered: str, args: dict[str, Any], result: str) -> str:
    path = _path(args)
    if _EDIT.search(lowered):
        return f"[{name}] edited {path} ({len(result):,} chars result)"
    if _WRITE.search(lowered) and not _READ.search(lowered):
        text = _first(args, ("content", "text", "file_text", "data"))
        lines = line_count(text) if isinstance(text, str) else "?"
        return f"[{name}] wrote to {path} ({lines} lines)"
    start = _first(args, _LINE_KEYS)
    if isinstance(start, list):
        start = start[0] if start else None
    return f"[{name}] read {path} from line {start or 1} ({len(result):,} chars)"


def _generic(name: str, args: dict[str, Any], result: str) -> str:
    pairs = [f"{key}={_short(value, 40)}" for key, value in list(args.items())[:4]]
    more = " …" if len(args) > 4 else ""
    shown = " ".join(pairs)
    return f"[{name}] {shown}{more} ({len(result):,} chars result)".replace("]  (", "] (")


def _with_refs(line: str, result: str) -> str:
    """The first few exact ids, paths and error names of the result the line does not name."""
    if len(result) > REFS_HEAD_CHARS + REFS_TAIL_CHARS:
        result = result[:REFS_HEAD_CHARS] + "\n" + result[-REFS_TAIL_CHARS:]
    refs: list[str] = []
    size = 0
    for value in find_anchors(result):
        if len(refs) >= MAX_REFS or size + len(value) > MAX_REFS_CHARS:
            break
        if value not in line:
            refs.append(value)
            size += len(value) + 2
    return f"{line}; refs: {', '.join(refs)}" if refs else line


def _with_error(line: str, result: str) -> str:
    if "-> exit 0," in line:
        return line
    error = first_error_line(result)
    return f"{line}; error: {error}" if error and error not in line else line
