"""Who is calling and which conversation a request belongs to (pure).

A session is identified by an explicit header (or a common alias), else by a body field
clients already use (each front door knows which), else by a hash of the conversation's
opening (system + first user message). Every session is scoped by a hash of the caller's
credential, so a guessed or spoofed session id never reaches another caller's checkpoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from compression.types import Message

SESSION_HEADERS = (
    "x-session-id",
    "x-ctxgate-session-id",
    "session-id",
    "session_id",
    "x-claude-code-session-id",
    "x-copilot-session-id",
    "helicone-session-id",
    "thread-id",
    "thread_id",
)
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class Identity:
    scope: str
    session_id: str
    derived: bool  # True when no explicit id was given


def scope_for(credential: str | None) -> str:
    """A stable, non-reversible scope for a credential ("anon" when there is none)."""
    if not credential:
        return "anon"
    return hashlib.sha256(credential.encode("utf-8")).hexdigest()[:24]


def identify(
    headers: Mapping[str, str], hint: str | None, messages: Sequence[Message], scope: str
) -> Identity:
    """From a session header, else the id the request's body carries (`hint`), else derived."""
    explicit = _explicit_id(headers, hint)
    if explicit is not None:
        return Identity(scope=scope, session_id=explicit, derived=False)
    return Identity(scope=scope, session_id=derived_session_id(messages), derived=True)


def _explicit_id(headers: Mapping[str, str], hint: str | None) -> str | None:
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return value.strip()[:_MAX_ID]
    if hint and hint.strip():
        return hint.strip()[:_MAX_ID]
    return None


def derived_session_id(messages: Sequence[Message]) -> str:
    """Hash of the system/developer messages and the first user message."""
    opening: list[Any] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            opening.append([role, message.get("content")])
            continue
        if role == "user":
            opening.append([role, message.get("content")])
        break
    digest = hashlib.sha256(orjson.dumps(opening, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return "auto-" + digest[:24]
