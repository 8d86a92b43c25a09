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
    text = _ENCODERS[False, sort_keys].encode(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _ENCODERS[True, sort_keys].encode(value)
    return text


# What json.dumps builds anew for each call with these arguments, built once: an archive
# serialises every replaced message.
_ENCODERS = {
    (escaped, sort): json.JSONEncoder(ensure_ascii=escaped, separators=(",", ":"), sort_keys=sort)
    for escaped in (False, True)
    for sort in (False, True)
}


def loads(text: str) -> Any:
    return json.loads(text)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
