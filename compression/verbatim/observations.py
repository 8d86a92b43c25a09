"""Which `user` messages are tool observations rather than the user's own words (pure).

Text-action agents (SWE-agent, mini-swe-agent, ReAct loops) have no tool role: the model
writes its action in the text, and the harness sends the command output back as a `user`
message. Those are summarized like tool results; carrying them verbatim would spend the room
meant for the user's task and constraints on old command output.

A user message counts as an observation only right after an assistant message without
`tool_calls` (the first user message of a conversation never does), and only when either

- it carries an explicit output marker (`<returncode>`, an `<output>` block, an
  `OBSERVATION:`-style first line, a file-viewer header), or
- that assistant message wrote an action block (a fenced block or an action tag) and the
  user message is output-shaped: little of it reads as prose.

A long prose message after an action (a new task statement, harness feedback) stays a user
message, even when the harness decorates it like an observation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from compression.messages.content import content_text
from compression.messages.toolpairs import tool_calls_of
from compression.messages.types import Message
from compression.summary.handoff import handoff_text, user_text

_MARKER_SCAN_CHARS = 400  # explicit markers open an observation
_MARKERS = (
    re.compile(r"<returncode>\s*-?\d+\s*</returncode>"),
    re.compile(r"^\s*<(?:output|observation|stdout|stderr|tool_output)>", re.IGNORECASE),
    re.compile(
        r"^\s*(?:OBSERVATION|Observation|EXECUTION RESULT|Execution result|Tool output|"
        r"Tool result|Command output)\s*[:\]]"
    ),
    re.compile(r"^\s*\[File: [^\]\n]+\(\d+ lines total\)\]"),
)
_ACTION = re.compile(
    r"```[\w-]*\n.*?```|<(?:command|execute|execute_bash|execute_ipython|bash|action|"
    r"function=[\w.-]+)>",
    re.DOTALL,
)
_CODE_START = re.compile(
    r"^(?:\d+[:|]|[-+]{3}|@@|[#$>]\s|>>>|\.\.\.|[{}\[\]()<]|(?:def|class|import|from|return|"
    r"if|for|while|elif|else|try|except|raise|with|print|const|let|var|function)\b)"
)
_PUNCTUATION = "()\"'“‘”’.,;:!?"
_INNER = str.maketrans("", "", "'’-")  # don't, well-known: still words
PROSE_MIN_WORDS = 5
PROSE_LETTER_SHARE = 0.75  # of a prose line's non-space characters
OUTPUT_PROSE_SHARE = 0.5  # below this share of prose characters a message is output-shaped
ACTION_SCAN_CHARS = 8000  # an agent's turn: its reasoning, then the action
SAMPLE_CHARS = 1200  # of a long message, its head and tail (in equal parts) are judged


def observation_indices(messages: Sequence[Message], start: int, end: int) -> frozenset[int]:
    """Indices in `messages[start:end]` of user messages that are tool observations."""
    return frozenset(
        index
        for index in range(max(start, 0), min(end, len(messages)))
        if messages[index].get("role") == "user" and is_observation(messages, index)
    )


def is_observation(messages: Sequence[Message], index: int) -> bool:
    """Whether `messages[index]` (a user message) is a tool observation, by the rules above."""
    message = messages[index]
    if message.get("role") != "user" or index == 0 or handoff_text(message) is not None:
        return False
    previous = messages[index - 1]
    if previous.get("role") != "assistant" or tool_calls_of(previous):
        return False
    text = user_text(message)
    if not text.strip():
        return False
    if has_output_marker(text):
        return True
    # A summary merged into the action message keeps the action after its end marker.
    action = user_text(previous) if handoff_text(previous) is not None else content_text(previous)
    return has_action(action) and prose_share(text) < OUTPUT_PROSE_SHARE


def clear_caches() -> None:
    """Forget memoized judgements (benchmarks measuring a cold pass)."""
    _prose_share.cache_clear()
    _has_action.cache_clear()


def has_output_marker(text: str) -> bool:
    head = text[:_MARKER_SCAN_CHARS]
    return any(pattern.search(head) for pattern in _MARKERS)


def has_action(text: str) -> bool:
    return _has_action(text[:ACTION_SCAN_CHARS])


@lru_cache(maxsize=4096)
def _has_action(text: str) -> bool:
    return _ACTION.search(text) is not None


def prose_share(text: str) -> float:
    """Share of non-space characters that sit on lines reading as sentences, not output."""
    if len(text) > SAMPLE_CHARS:
        half = SAMPLE_CHARS // 2
        text = text[:half] + "\n" + text[-half:]
    return _prose_share(text)


@lru_cache(maxsize=4096)  # keyed by a bounded sample; a session's messages are judged again
def _prose_share(text: str) -> float:  # on every later compression
    total = prose = 0
    for raw in text.splitlines():
        line = raw.strip()
        size = len(line) - line.count(" ")
        total += size
        if size and _is_prose(line, size):
            prose += size
    return prose / total if total else 1.0


def _is_prose(line: str, size: int) -> bool:
    if _CODE_START.match(line):
        return False
    tokens = line.split()
    if len(tokens) < PROSE_MIN_WORDS:
        return False
    words = letters = 0
    for token in tokens:
        if token.strip(_PUNCTUATION).translate(_INNER).isalpha():
            words += 1
            letters += len(token)
    return words >= PROSE_MIN_WORDS and letters >= PROSE_LETTER_SHARE * size
