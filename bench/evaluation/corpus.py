"""The shared corpus and the long sessions chained from it.

A session is one long client history built by chaining real transcripts: the first
transcript's system prompt, then every transcript's turns (later tasks arrive as new user
turns). Sessions are chained until they reach a multiple of the window under test, because
the public transcripts are short (at most ~14K tokens each).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.simulator.tokens import count_text, message_tokens

Message = dict[str, Any]

TAU_FILE = "tau_bench_airline_gpt4o.jsonl"
TAU_TOOLS = "tools/tau_bench_airline_tools.json"
SWE_TEXT_FILES = ("sweagent_text_trajs.jsonl", "minisweagent_test_trajs.jsonl")
SWE_FC_FILE = "sweagent_fc_demos.jsonl"
AGENT_FILES = ("agents_opencode.jsonl", "agents_aider.jsonl")  # bench/record_agents.py
KINDS = ("tau", "swe-text", "swe-fc", "agents")
MAX_PASSES = 6  # a small corpus is cycled to reach the target size (more passes when needed)


class CorpusMissing(RuntimeError):
    """The shared corpus is not where CI or a developer checkout puts it."""


def find_corpus(start: Path) -> Path:
    """The repository's copy (tests/data/corpus), else `shared/corpus` in `start` or above."""
    vendored = Path(__file__).resolve().parents[2] / "tests" / "data" / "corpus"
    if (vendored / TAU_FILE).is_file():
        return vendored
    for folder in (start, *start.parents):
        candidate = folder / "shared" / "corpus"
        if (candidate / TAU_FILE).is_file():
            return candidate
    raise CorpusMissing(f"no shared/corpus/{TAU_FILE} above {start}")


@dataclass(frozen=True)
class Transcript:
    """One corpus conversation, cut after its last assistant message."""

    source: str
    messages: list[Message]
    observations_are_users: bool  # text-action agents: tool output comes back as `user`


@dataclass
class Needle:
    place: str  # "user" (a statement of the client) or "tool" (an observation)
    depth: float  # requested position, share of the session's tokens
    actual_depth: float
    index: int  # message index in the session
    code: str
    label: str = "access code"  # the fact reads "The {label} for {subject} is {code}."
    subject: str = ""


@dataclass
class Session:
    name: str
    kind: str
    window: int
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    stated: list[int]  # indices of user messages that are the client's own words
    observations: list[int]  # indices of tool outputs (tool role, or user role in text agents)
    sources: list[str]
    needles: list[Needle] = field(default_factory=list)
    _tokens: list[int] | None = None

    def message_tokens(self) -> list[int]:
        """Provider-counted tokens per message (cached; call `forget_tokens` after edits)."""
        if self._tokens is None:
            self._tokens = [message_tokens(m) for m in self.messages]
        return self._tokens

    def forget_tokens(self) -> None:
        self._tokens = None

    def tools_tokens(self) -> int:
        if not self.tools:
            return 0
        return count_text(json.dumps(self.tools, ensure_ascii=False, separators=(",", ":")))

    def points(self) -> list[int]:
        """Prefix lengths sent as requests: a user/tool message followed by an assistant one."""
        msgs = self.messages
        return [
            i + 1
            for i in range(len(msgs) - 1)
            if msgs[i].get("role") in ("user", "tool") and msgs[i + 1].get("role") == "assistant"
        ]

    def total_tokens(self) -> int:
        return sum(self.message_tokens()) + self.tools_tokens() + 3


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _trimmed(messages: list[Message]) -> list[Message]:
    """Cut after the last complete exchange (a plain assistant reply, or the tool result that
    answers the last pending call): a run that stops on an unanswered call would otherwise
    leave the next chained task behind it."""
    pending: set[str] = set()
    cut = 1
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            pending = {call.get("id", "") for call in message.get("tool_calls") or []}
        elif role == "tool":
            pending.discard(message.get("tool_call_id", ""))
        if role in ("assistant", "tool") and not pending:
            cut = index + 1
    return messages[:cut]


def load_transcripts(corpus: Path, kind: str) -> list[Transcript]:
    if kind == "tau":
        rows = _rows(corpus / TAU_FILE)
        return [Transcript(r["id"], _trimmed(r["messages"]), False) for r in rows]
    if kind == "swe-fc":
        return [
            Transcript(r["id"], _trimmed(r["messages"]), False) for r in _rows(corpus / SWE_FC_FILE)
        ]
    if kind == "swe-text":
        rows = [row for name in SWE_TEXT_FILES for row in _rows(corpus / name)]
        return [Transcript(r["id"], _trimmed(r["messages"]), True) for r in rows]
    if kind == "agents":
        return [Transcript(r["id"], _trimmed(r["messages"]), False) for r in _agent_rows(corpus)]
    raise ValueError(f"unknown session kind {kind!r}; choose from {KINDS}")


def _agent_rows(corpus: Path) -> list[dict[str, Any]]:
    paths = [corpus / name for name in AGENT_FILES]
    return [row for path in paths if path.is_file() for row in _rows(path)]


def load_tools(corpus: Path, kind: str) -> list[dict[str, Any]] | None:
    """tau-bench ships its tool schemas and the recorded agents carry theirs (OpenCode's: a
    chained session sends one set); SWE-agent demos are sent without `tools`."""
    if kind == "agents":
        return next((r["tools"] for r in _agent_rows(corpus) if r.get("tools")), None)
    if kind != "tau":
        return None
    tools: list[dict[str, Any]] = json.loads((corpus / TAU_TOOLS).read_text())
    return tools


def _rotation(items: Sequence[Transcript], start: int, passes: int) -> Iterator[Transcript]:
    for n in range(len(items) * passes):
        yield items[(start + n) % len(items)]


def _passes(items: Sequence[Transcript], target_tokens: int) -> int:
    """Enough passes over a small corpus to reach the target (a 128K window needs 16 passes
    over the SWE-agent function-calling demos), but never an endless loop."""
    once = sum(message_tokens(m) for t in items for m in t.messages[1:]) or 1
    return max(MAX_PASSES, -(-target_tokens // once) + 1)


def _fits(transcript: Transcript, max_message: int) -> bool:
    # System prompts are left out: only the first transcript's is used, as the session head.
    return all(
        message_tokens(m) <= max_message for m in transcript.messages if m.get("role") != "system"
    )


@dataclass
class _Builder:
    """Accumulates transcripts into one session and remembers who said what."""

    messages: list[Message] = field(default_factory=list)
    stated: list[int] = field(default_factory=list)
    observations: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    tokens: int = 0
    one_task: bool = False  # keep the first transcript's task statement only

    def add(self, transcript: Transcript) -> None:
        body = transcript.messages
        later = bool(self.messages)
        if not self.messages:
            self.messages.append(body[0])
            self.tokens += message_tokens(body[0])
        seen_assistant = False
        for message in body[1:]:
            role = message.get("role")
            if role == "system":
                continue  # later transcripts' system prompts: one session has one head
            index = len(self.messages)
            if role == "tool" or (
                role == "user" and transcript.observations_are_users and seen_assistant
            ):
                self.observations.append(index)
            elif role == "user":
                if self.one_task and later:
                    continue  # a later transcript's task: one session works on one task
                self.stated.append(index)
            seen_assistant = seen_assistant or role == "assistant"
            self.messages.append(message)
            self.tokens += message_tokens(message)
        self.sources.append(transcript.source)


def chain(
    transcripts: Sequence[Transcript],
    start: int,
    target_tokens: int,
    max_message: int,
    one_task: bool = False,
) -> tuple[_Builder, int]:
    """Chain transcripts from `start` until `target_tokens`; returns the builder and next start.

    Transcripts holding a single message over `max_message` tokens are skipped: a message that
    takes a large share of the window leaves no room to compress around it (SWE-agent
    demonstrations reach 8K tokens).
    """
    usable = [t for t in transcripts if _fits(t, max_message)]
    if not usable:
        raise ValueError(f"no transcript keeps every message under {max_message} tokens")
    builder = _Builder(one_task=one_task)
    taken = 0
    for transcript in _rotation(usable, start, _passes(usable, target_tokens)):
        builder.add(transcript)
        taken += 1
        if builder.tokens >= target_tokens:
            break
    return builder, (start + taken) % len(usable)


ONE_TASK = "task-"


def _base(kind: str) -> str:
    return kind.removeprefix(ONE_TASK)


def build_sessions(
    corpus: Path, kinds: Sequence[str], window: int, size_factor: float
) -> list[Session]:
    """One session per entry of `kinds`; each kind continues where its previous session ended.
    A `task-` kind is a one-task session: its kind's transcripts chained under the first one's
    task statement alone (the later ones' tool turns go on with that task)."""
    cursors = dict.fromkeys(kinds, 0)
    counts = dict.fromkeys(kinds, 0)
    loaded = {kind: load_transcripts(corpus, _base(kind)) for kind in set(kinds)}
    sessions: list[Session] = []
    for kind in kinds:
        tools = load_tools(corpus, _base(kind))
        builder, cursors[kind] = chain(
            loaded[kind],
            cursors[kind],
            int(window * size_factor),
            max_message=int(window * 0.3),
            one_task=kind.startswith(ONE_TASK),
        )
        name = f"{kind}-{window // 1024}k-{counts[kind]}"
        counts[kind] += 1
        sessions.append(
            Session(
                name,
                kind,
                window,
                [dict(m) for m in builder.messages],  # copies: needles are planted in place
                tools,
                builder.stated,
                builder.observations,
                builder.sources,
            )
        )
    return sessions
