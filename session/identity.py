"""Who is calling and which conversation a request belongs to (pure).

A session is identified by an explicit header (or a common alias), else by a body field
clients already use (each front door knows which), else by a hash of the conversation's
opening (system + first user message). Every session is scoped by a hash of the caller's
credential, so a guessed or spoofed session id never reaches another caller's checkpoints.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import orjson

from compression import Message, content_text, preamble_end, system_end
from session.errors import BadRequest

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
_MIN_COPIED = 80  # shorter common endings are the user's own words
# C0 controls (TAB, CR, LF, NUL…), DEL and C1 controls: never part of a real id, and a
# header cannot carry most of them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What stays as it is in the canonical id: printable ASCII but '%', the escape character.
_PLAIN = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


@dataclass(frozen=True, slots=True)
class Identity:
    scope: str
    session_id: str
    derived: bool  # True when no explicit id was given


@lru_cache(maxsize=1024)
def scope_for(credential: str | None) -> str:
    """A stable, non-reversible scope for a credential ("anon" when there is none).

    Remembered for the 1,024 credentials seen last (held in memory, as every request's
    headers hold them anyway): a hash through OpenSSL costs well under a microsecond in a
    loop but tens of microseconds once per request, its code gone cold.
    """
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
            # Header values arrive decoded as Latin-1, one character per byte: back to the
            # bytes, then read as the UTF-8 they almost always are.
            raw = value.strip().encode("latin-1", "replace")
            return canonical_session_id(raw.decode("utf-8", "replace"), f"header {name!r}")
    if hint and hint.strip():
        return canonical_session_id(
            hint.strip(),
            "the body's session field (metadata.session_id, prompt_cache_key or metadata.user_id)",
        )
    return None


def canonical_session_id(value: str, source: str = "session id") -> str:
    """The id as ctxgate keeps and echoes it: safe in a header, a URL path and a log line.

    Control characters are refused (400 naming `source`), before any upstream call; any other
    non-ASCII character (and '%' alongside one) is percent-encoded as UTF-8, so `café` becomes
    `caf%C3%A9`, the form a URL path carries it in anyway. Printable ASCII ids stay as they are.
    """
    value = value[:_MAX_ID]
    if _CONTROL.search(value):
        raise BadRequest(
            f"The session id in {source} contains control characters "
            "(CR, LF, TAB, NUL, DEL…); use printable text.",
            param=source if source == "metadata.session_id" else None,
            code="invalid_session_id",
        )
    if value.isascii():
        return value
    return quote(value, safe=_PLAIN, encoding="utf-8", errors="replace")


def derived_session_id(messages: Sequence[Message]) -> str:
    """Hash of the system/developer messages and the first user message (after a client's
    canned opening: see `conversation_opening`)."""
    opening: list[Any] = []
    for message in conversation_opening(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            opening.append([role, message.get("content")])
            continue
        if role == "user":
            opening.append([role, message.get("content")])
        break
    digest = hashlib.sha256(orjson.dumps(opening, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return "auto-" + digest[:24]


def conversation_opening(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages a derived id is made of: the system messages, then the first user message
    after a client's canned opening when there is one (aider's few-shot examples are the same
    in every conversation, so the first user message would be too), less a suffix the client
    copied from its system prompt (aider appends its format reminder to the newest message
    only: the request would read differently on the next turn)."""
    start, end = system_end(messages), preamble_end(messages)
    if end == start or end >= len(messages) or messages[end].get("role") != "user":
        return messages
    system = "\n".join(content_text(message) for message in messages[:start])
    text = _without_copied_suffix(content_text(messages[end]), system)
    return [*messages[:start], {"role": "user", "content": text}]


def _without_copied_suffix(text: str, system: str) -> str:
    """`text` less a trailing paragraph run found verbatim in `system` (short ones stay)."""
    cut = text.find("\n\n", max(0, len(text) - len(system) - 2))
    while cut >= 0:
        rest = text[cut + 2 :].strip()
        if len(rest) >= _MIN_COPIED and rest in system:
            return text[:cut]
        cut = text.find("\n\n", cut + 2)
    return text
