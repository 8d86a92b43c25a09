"""Frozen values that go in and out of SessionStore; no ORM row ever leaves storage/.

Times are float epoch seconds from the store's clock. Messages are the plain dicts the client
sent (OpenAI Chat Completions wire shape), kept as JSON text in the database.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final, Literal, TypeVar

Message = dict[str, Any]
JSONObject = dict[str, Any]
SessionOrder = Literal["last_activity", "tokens"]

# last_prompt_tokens after a compression: the real figure for the new view is not known yet.
PROMPT_TOKENS_PENDING: Final = -1


class Unset(enum.Enum):
    """Marks an argument the caller did not pass (None is a real value there)."""

    UNSET = "UNSET"


UNSET: Final = Unset.UNSET

D = TypeVar("D")

# Per dataclass: its fields' values as a tuple, and each field's place in it (None: the class
# does not take its fields positionally, so `evolved` leaves it to `dataclasses.replace`).
_Shape = tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]
_SHAPES: dict[type, _Shape | None] = {}


def evolved(value: D, **changes: Any) -> D:
    """`dataclasses.replace(value, **changes)` at about half its cost, for the values copied
    on every request (a turn, a session row): `replace` looks up and checks every field of the
    class again on each call."""
    cls = type(value)
    shape = _SHAPES[cls] if cls in _SHAPES else _shape_of(cls)
    if shape is None:
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    fields, places = shape
    values = list(fields(value))
    for name, new in changes.items():
        place = places.get(name)
        if place is None:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        values[place] = new
    return cls(*values)


def _shape_of(cls: type) -> _Shape | None:
    names = [f.name for f in dataclasses.fields(cls)]
    parameters = list(inspect.signature(cls).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes = [p.name for p in parameters if p.kind in positional]
    shape: _Shape | None = None
    if len(names) > 1 and takes == names and len(parameters) == len(names):
        shape = attrgetter(*names), {name: at for at, name in enumerate(names)}
    _SHAPES[cls] = shape
    return shape


@dataclass(frozen=True, slots=True)
class SessionKey:
    """scope = hash of the caller's credential; key = the session id within that scope."""

    scope: str
    key: str


@dataclass(frozen=True, slots=True)
class SessionRecord:
    scope: str
    key: str
    model: str
    created_at: float
    updated_at: float
    last_prompt_tokens: int | None  # PROMPT_TOKENS_PENDING right after a compression
    last_completion_tokens: int | None
    last_message_count: int | None
    last_usage_estimated: bool
    last_usage_at: float | None
    request_count: int
    compression_count: int
    total_prompt_tokens: int
    total_completion_tokens: int
    engine_state: JSONObject
    parent_key: str | None
    child_key: str | None
    last_compression_at: float | None
    # Lineages (see `Fork`): the client's session id every row of it names; for a fork, the
    # row it shares its first `fork_len` client messages with; the latest request's prefix.
    root_key: str | None = None
    fork_of: str | None = None
    fork_len: int | None = None
    tip_len: int | None = None
    tip_digest: str | None = None

    @property
    def sk(self) -> SessionKey:
        return SessionKey(self.scope, self.key)

    @property
    def root(self) -> SessionKey:
        """The session id the client names, whichever lineage or rotation this row is."""
        return SessionKey(self.scope, self.root_key or self.key)


@dataclass(frozen=True, slots=True)
class Fork:
    """A new lineage of `root`: a conversation that extends no lineage's tip (a rewind, an
    edited message, a parallel run with the same opening). It shares its first `fork_len`
    client messages with the row `fork_of` (None: nothing inherited), whose originals of
    those positions its archive reads; its tip is the request that found it."""

    root: SessionKey
    key: str
    model: str
    fork_of: str | None
    fork_len: int
    tip_len: int
    tip_digest: str
    engine_state: JSONObject
    max_lineages: int


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One upstream response's usage.

    `at` should be when the request's view was chosen: usage older than the session's last
    compression (or than the usage already stored) bumps the counters but does not overwrite
    the last_* figures, so a late write-behind cannot undo a compression's sentinel.
    None means "now" (stamped when the record is handed to the store).
    """

    sk: SessionKey
    model: str
    prompt_tokens: int
    completion_tokens: int
    message_count: int
    at: float | None = None
    estimated: bool = False
    # The request's client prefix (length, chained digest), when it was digested: the
    # lineage's new tip.
    tip_len: int | None = None
    tip_digest: str | None = None


@dataclass(frozen=True, slots=True)
class UsagePoint:
    at: float
    prompt_tokens: int
    completion_tokens: int
    estimated: bool


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A compression event to store. Counts and durations must be >= 0 (enforced by CHECKs)."""

    sk: SessionKey
    trigger: str
    outcome: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    duration_ms: float
    error: str | None = None
    checkpoint_id: int | None = None
    at: float | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """A stored compression event."""

    id: int
    at: float
    trigger: str
    outcome: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    duration_ms: float
    error: str | None
    checkpoint_id: int | None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The first `prefix_len` client messages (digest `prefix_digest`) are replaced by `messages`.

    Checkpoints are immutable once written; treat `messages` as read-only.
    """

    id: int
    scope: str
    key: str
    prefix_len: int
    prefix_digest: str
    messages: list[Message]
    tokens_before: int
    tokens_after: int
    summary: str | None
    created_at: float
    # For each message, the client position it holds verbatim (None: written by ctxgate);
    # None for checkpoints stored before sources were recorded.
    sources: tuple[int | None, ...] | None = None

    @property
    def sk(self) -> SessionKey:
        return SessionKey(self.scope, self.key)


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A checkpoint without its replacement list (for listings)."""

    id: int
    prefix_len: int
    prefix_digest: str
    message_count: int
    tokens_before: int
    tokens_after: int
    summary: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class CompressionCommit:
    """Everything one compression writes, in one transaction.

    archived: (position in the client's list, original message) pairs the checkpoint replaces
    that no earlier checkpoint of the chain did.
    sources: for each message, the client position it holds verbatim (None: ctxgate's own).
    rotate_to: when set, a child session with this key is created and linked to `sk`; the
    checkpoint, archive, event and engine state then belong to the child.
    event.sk and event.checkpoint_id are ignored: the commit fills them in.
    """

    sk: SessionKey
    model: str
    prefix_len: int
    prefix_digest: str
    messages: Sequence[Message]
    summary: str | None
    tokens_before: int
    tokens_after: int
    archived: Sequence[tuple[int, Message]]
    event: EventRecord
    engine_state: JSONObject
    rotate_to: str | None = None
    sources: Sequence[int | None] | None = None


@dataclass(frozen=True, slots=True)
class ArchivedMessage:
    position: int
    message: Message
    checkpoint_id: int | None
    archived_at: float


@dataclass(frozen=True, slots=True)
class ArchiveFacts:
    """What the database holds to audit a session's archive: its newest checkpoint (by id)
    and the positions archived for it and the sessions it was rotated from."""

    checkpoint_id: int | None
    prefix_len: int
    sources: tuple[int | None, ...] | None  # None: the checkpoint predates recorded sources
    archived: tuple[int, ...]  # distinct positions, ascending


@dataclass(frozen=True, slots=True)
class SessionDetail:
    session: SessionRecord
    events: list[Event]
    checkpoints: list[CheckpointInfo]
    usage: list[UsagePoint]  # oldest first; the newest `max_points` only
    archived_count: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Write-behind counters; how many session lookups the database answered (the rest came
    from this process's copies) and how many asked SQLite whether the copies are current."""

    usage_written: int = 0
    usage_failed: int = 0
    usage_dropped: int = 0
    usage_pending: int = 0
    session_reads: int = 0
    version_checks: int = 0
