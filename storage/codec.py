"""JSON text for message lists and engine state, and the digest used to dedupe the archive."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON, UTF-8 kept as is.

    A lone surrogate ("\\ud800" sent escaped by a client) cannot be encoded as UTF-8, which
    both SQLite and PostgreSQL need; only then fall back to ASCII escapes.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value, separators=(",", ":"), sort_keys=sort_keys)
    return text


def loads(text: str) -> Any:
    return json.loads(text)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
