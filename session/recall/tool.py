"""ctxgate's recall tool: the model reads back what compressions archived.

While a session's view comes from a checkpoint, the request ctxgate forwards carries one tool
of its own, `ctxgate_recall`. When the model calls it, the gateway answers from the session's
archive (a handle `m12`, a range `m12-m15`, or words to search) and calls the model again; the
client sees only the final answer. Each client request may spend at most `max_rounds` rounds
and `max_tokens` tokens of archived text, and never more than the window has room for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson

from compression import (
    RECALL_TOOL,
    Message,
    TokenCounter,
    ToolSchema,
    content_text,
    handle,
    parse_handles,
)
from session.config.settings import RecallSettings
from session.metrics import Metrics
from session.ports.frontdoor import AnswerCalls, ToolCall
from session.recall.ahead import Foresight, densest
from session.turn import Turn, reservation
from storage import EventRecord, SessionKey, SessionStore, StorageError, search_terms

log = logging.getLogger("ctxgate.recall")

RECALL_SCHEMA: ToolSchema = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL,
        "description": (
            "Read the exact original of earlier conversation content that was compacted out "
            "of view. Compacted places name handles such as m12: the line under a compaction "
            "summary lists their ranges, a shortened message ends with [archived: m12]. Call "
            "this before guessing at anything compacted (file contents, command output, ids, "
            "numbers, the user's exact words): pass `handle` (m12, or a range m12-m15) to read "
            "originals, `query` (words that appear in it) to search them, or both to read a "
            "handle and search for what it may not hold. Call it on its own, before answering "
            "or calling other tools."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": "A handle (m12) or range (m12-m15)."},
                "query": {"type": "string", "description": "Words to search the archive for."},
            },
            "additionalProperties": False,
        },
    },
}

# tool_choice values that still leave the model free to call ctxgate's tool.
_OPEN_CHOICES = frozenset({"auto", "required", "any"})
_HITS = 5
_MIN_OUTPUT = 1024  # output tokens a recall round leaves the answer, at least
_MIN_USEFUL = 256  # a recall allowance smaller than this is not worth offering
_SNIPPET = 240  # characters around a search hit


@dataclass(frozen=True, slots=True)
class Budget:
    """What one client request may still spend on recall."""

    rounds: int
    tokens: int


def offered(turn: Turn, settings: RecallSettings) -> bool:
    """Whether this request's forwarded body carries the recall tool."""
    if not settings.enabled or turn.checkpoint_id is None or turn.request.passthrough:
        return False
    if any(_tool_name(tool) == RECALL_TOOL for tool in turn.request.tools or ()):
        return False
    if "functions" in turn.request.body:  # legacy function calling: no `tools` beside it
        return False
    choice: Any = turn.request.body.get("tool_choice")
    if isinstance(choice, dict):
        choice = choice.get("type")
    return choice is None or choice in _OPEN_CHOICES


def budget(turn: Turn, settings: RecallSettings, used: int, counter: TokenCounter) -> Budget:
    """The request's recall allowance: the settings, within the room the window has left
    and, when the client set an output limit, within what that limit can give up (a
    provider that counts it refuses a prompt that grows into it; see `_output_after`).
    `used` is the view's size, tools included."""
    room = turn.context_length - used - (reservation(turn) or 0) - _overhead(counter)
    asked = _asked(turn)
    if asked is not None:
        room = min(room, asked - _min_output(asked))
    return Budget(settings.max_rounds, max(0, min(settings.max_tokens, room)))


def _asked(turn: Turn) -> int | None:
    return turn.max_tokens or turn.request.max_tokens


def _min_output(asked: int) -> int:
    return min(_MIN_OUTPUT, asked // 2)


def _output_after(turn: Turn, added: int) -> int | None:
    """The output limit for the next round: lowered by what the round added to the prompt,
    so that prompt + output stays where the first round's was."""
    asked = _asked(turn)
    return None if asked is None else max(_min_output(asked), asked - added)


def _overhead(counter: TokenCounter) -> int:
    """Tokens the tool's own schema takes, with a call and its framing."""
    return counter.count_text(orjson.dumps(RECALL_SCHEMA).decode()) + 64


@dataclass(frozen=True, slots=True)
class Asked:
    """What one call asks for, read leniently: models fill every field, or put words where
    a handle goes."""

    kind: str  # "handle", "query", or "both" (a handle to read and a query to search)
    text: str  # the handle, or the words to search
    note: str = ""  # says what was done instead of what the arguments named
    query: str = ""  # with "both": the words that came with the handle


def asked(arguments: dict[str, Any]) -> Asked | None:
    """Every combination gets an answer. A handle that parses is read, and a query that came
    with it is searched too (unless the handle's text holds it); a handle that does not parse
    is searched as words, unless a query came with it (then the query is searched). None:
    nothing to do."""
    wanted, query = _field(arguments, "handle"), _field(arguments, "query")
    if wanted and parse_handles(wanted) is not None:
        return Asked("both", wanted, query=query) if query else Asked("handle", wanted)
    if wanted and query:
        return Asked("query", query, f"`{wanted}` is not a handle; searched for the query.")
    if wanted:
        return Asked("query", wanted, f"`{wanted}` is not a handle; searched for it as words.")
    return Asked("query", query) if query else None


def holds(text: str, query: str) -> bool:
    """Whether `text` holds every term of `query` (as the archive's search reads both)."""
    terms = search_terms(query).distinct()
    lowered = text.lower()
    return bool(terms) and all(term in lowered for term in terms)


def _field(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    return value.strip() if isinstance(value, str) else ""


class Archive:
    """One session's archived originals, read through the store per call: a handle reads
    the rows it names, a query goes to the database's full-text index."""

    def __init__(self, store: SessionStore, key: SessionKey) -> None:
        self.store = store
        self.key = key

    async def answer(self, call: ToolCall, tokens: int, counter: TokenCounter) -> tuple[str, str]:
        """The tool's answer to one call within `tokens`, and what kind of call it was.
        Raises StorageError when the archive cannot be read."""
        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            return "Arguments must be a JSON object with `handle` or `query`.", "invalid"
        found = asked(arguments)
        if found is None:
            return "Pass `handle` (such as m12) or `query` (words to search for).", "invalid"
        if found.kind == "handle":
            return await self.fetch(found.text, tokens, counter), "handle"
        if found.kind == "both":
            return await self.both(found.text, found.query, tokens, counter), "both"
        return await self.search(found.text, tokens, counter, found.note), "query"

    async def both(self, wanted: str, query: str, tokens: int, counter: TokenCounter) -> str:
        """The handle's originals, then the query's hits when those do not hold the query
        (hits the handle already showed are left out)."""
        positions = parse_handles(wanted) or []
        found = await self.store.fetch_archived(self.key, positions)
        shown = "\n\n".join(_shown(a.position, cast(Message, a.message)) for a in found)
        if shown and holds(shown, query):
            lead = f"{wanted} holds {query!r}; its original:"
            return _within(f"{lead}\n{shown}", tokens, counter)
        if not shown:
            note = f"Nothing is archived under {wanted}; searched for the query instead."
            return await self.search(query, tokens, counter, note)
        lead = f"{wanted} does not hold {query!r}: its original, then the archive searched for it."
        head = _within(f"{lead}\n{shown}", tokens * 2 // 3, counter)
        left = tokens - counter.count_text(head)
        hits = await self.search(query, left, counter, exclude=frozenset(positions))
        return f"{head}\n\n{hits}"

    async def fetch(self, wanted: str, tokens: int, counter: TokenCounter) -> str:
        positions = parse_handles(wanted)
        if positions is None:
            return f"{wanted!r} is not a handle; handles look like m12 or m12-m15."
        found = await self.store.fetch_archived(self.key, positions)
        parts = [_shown(a.position, cast(Message, a.message)) for a in found]
        if not parts:
            return (
                f"Nothing is archived under {wanted}: either it is still in the conversation "
                "as it was, or no compression replaced it."
            )
        return _within("\n\n".join(parts), tokens, counter)

    async def search(
        self,
        query: str,
        tokens: int,
        counter: TokenCounter,
        note: str = "",
        exclude: frozenset[int] = frozenset(),
    ) -> str:
        found = await self.store.search_archive(self.key, query, _HITS + min(len(exclude), 20))
        found = [a for a in found if a.position not in exclude][:_HITS]
        lead = f"{note}\n" if note else ""
        if not found:
            return f"{lead}No archived message matches {query!r}."
        terms = set(search_terms(query).distinct())
        shown = [_shown(a.position, cast(Message, a.message)) for a in found]
        lines = [f"{lead}Archived messages matching {query!r}, best first:"]
        lines += [f"- {_snippet(text, terms)}" for text in shown]
        lines.append("Read one in full with its handle.")
        return _within("\n".join(lines), tokens, counter)


def _snippet(text: str, terms: set[str]) -> str:
    header, _, body = text.partition("\n")
    start = max(0, densest(body.lower(), terms, _SNIPPET // 2) - _SNIPPET // 3)
    piece = body[start : start + _SNIPPET].replace("\n", " ")
    return f"{header} {'…' if start else ''}{piece}{'…' if start + _SNIPPET < len(body) else ''}"


def _shown(position: int, message: Message) -> str:
    """An archived message as the tool shows it: its handle and role, then its text."""
    role = str(message.get("role") or "?")
    if role == "tool":
        role = f"tool result for {message.get('tool_call_id') or '?'}"
    text = content_text(message)
    calls = [
        f"[called {call.get('function', {}).get('name')}"
        f"({call.get('function', {}).get('arguments') or ''})]"
        for call in message.get("tool_calls") or []
    ]
    return f"{handle(position)} ({role}):\n" + "\n".join(filter(None, [text, *calls]))


def _within(text: str, tokens: int, counter: TokenCounter) -> str:
    """`text`, cut to about `tokens` with a note saying so."""
    if counter.count_text(text) <= tokens:
        return text
    limit = max(0, tokens * 3)
    while limit > 0 and counter.count_text(text[:limit]) > tokens:
        limit = int(limit * 0.8)
    return text[:limit] + "\n…[cut: this request's recall budget is spent]"


def _tool_name(tool: ToolSchema) -> str | None:
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def answered(turn: Turn, message: Message, results: Sequence[tuple[ToolCall, str]]) -> Turn:
    """The turn whose view goes on with the model's recall calls and ctxgate's answers."""
    replies: list[Message] = [
        {"role": "tool", "tool_call_id": call.id, "content": text} for call, text in results
    ]
    return replace(turn, view=[*turn.view, message, *replies], estimate=None)


class Recaller:
    """Answers the model's recall calls for the gateway, from the session's archive."""

    def __init__(
        self,
        store: SessionStore,
        settings: RecallSettings,
        counter: Callable[[Turn], TokenCounter],
        estimate: Callable[[Turn], int],
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.settings = settings
        self.counter = counter
        # The view's tokens, tools included: the session's last real figure plus what was
        # appended when it has one (no recount of a long history), else the estimate.
        self.estimate = estimate
        self.metrics = metrics
        self.foresight = Foresight(store, settings, counter)

    async def ahead(self, turn: Turn) -> Turn:
        """Recall before asking (see `session.recall.ahead`)."""
        return await self.foresight.apply(turn)

    def offer(self, turn: Turn) -> Turn:
        """The turn with the recall tool among those it sends, when it is offered."""
        if not offered(turn, self.settings) or self.budget(turn).tokens < _MIN_USEFUL:
            return turn
        return replace(turn, tools=(*turn.tools, RECALL_SCHEMA))

    def budget(self, turn: Turn) -> Budget:
        return budget(turn, self.settings, self.estimate(turn), self.counter(turn))

    async def answer(self, turn: Turn, found: AnswerCalls, left: Budget) -> tuple[Turn, Budget]:
        """The turn going on with the calls answered, and what is left to spend."""
        counter = self.counter(turn)
        archive = Archive(self.store, turn.key)
        results: list[tuple[ToolCall, str]] = []
        tokens = left.tokens
        for call in found.calls:
            if tokens <= 0:
                text, kind = "This request's recall budget is spent; go on without it.", "spent"
            else:
                text, kind = await _answered(archive, call, tokens, counter, turn.key)
            spent = counter.count_text(text)
            tokens -= spent
            self.metrics.recalled(kind, spent)
            results.append((call, text))
        rounds = left.rounds - 1
        if rounds == 0:
            results = [(c, t + _LAST_ROUND) for c, t in results]
        done = answered(turn, found.message, results)
        added = counter.count_messages(done.view[len(turn.view) :])
        done = replace(
            done,
            max_tokens=_output_after(turn, added),
            recalls=turn.recalls + 1,
            recalled_tokens=turn.recalled_tokens + left.tokens - tokens,
        )
        return done, Budget(rounds, max(0, tokens))

    async def record(self, first: Turn, last: Turn, hidden: bool, seconds: float) -> None:
        """One event for a request that recalled: rounds, tokens read, whether calls were
        kept from the client."""
        if not last.recalls:
            return
        event = EventRecord(
            sk=last.key,
            trigger="recall",
            outcome="hidden" if hidden else "answered",
            tokens_before=last.recalled_tokens,
            tokens_after=last.recalled_tokens,
            messages_before=len(first.view),
            messages_after=len(last.view),
            duration_ms=seconds * 1000,
        )
        try:
            await self.store.add_event(event)
        except StorageError as exc:
            log.warning("session %s: a recall event was not stored: %s", last.key.key, exc)


async def _answered(
    archive: Archive, call: ToolCall, tokens: int, counter: TokenCounter, key: SessionKey
) -> tuple[str, str]:
    try:
        return await archive.answer(call, tokens, counter)
    except StorageError as exc:
        log.warning("session %s: the archive could not be read: %s", key.key, exc)
        return "The archive cannot be read right now; go on without it.", "error"


_LAST_ROUND = "\n[No more recall in this request: answer with what you have.]"
