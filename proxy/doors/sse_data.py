"""The data of one complete SSE event, and the event with its data replaced (pure); JSON
objects read from answers and events, and their fields read typed.

A call filter rewrites a few events of a relayed stream; everything else about the event (its
`event:` line, its blank-line end) stays as the upstream sent it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from proxy.doors.bodies import JsonObject

_DATA_LINE = re.compile(rb"^data:[ ]?([^\r\n]*)(\r\n|\r|\n|$)", re.MULTILINE)


def json_object(data: bytes) -> JsonObject | None:
    """`data` parsed when it is a JSON object (an answer, an event's data), else None."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def text_at(obj: Mapping[str, object], key: str) -> str | None:
    """`obj[key]` when it is a string, else None (absent, or not of its documented type)."""
    value = obj.get(key)
    return value if isinstance(value, str) else None


def count_at(obj: Mapping[str, object], key: str) -> int | None:
    """`obj[key]` when it is an integer (JSON has no other kind of count), else None."""
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def objects(value: object) -> list[JsonObject]:
    """The objects in a JSON array (`choices`, `output`); none when it is not an array."""
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, dict)]


def data_of(event: bytes) -> bytes:
    """The event's data: its `data:` lines joined by newlines."""
    return b"\n".join(match.group(1) for match in _DATA_LINE.finditer(event))


def with_data(event: bytes, data: bytes) -> bytes:
    """The event with its data lines replaced by one line holding `data`."""
    matches = list(_DATA_LINE.finditer(event))
    if not matches:
        return event
    pieces = [event[: matches[0].start()], b"data: ", data, matches[0].group(2) or b"\n"]
    # What lies between and after the data lines (an `id:` line, the blank-line end) stays.
    ends = [match.start() for match in matches[1:]] + [len(event)]
    pieces.extend(event[match.end() : end] for match, end in zip(matches, ends, strict=True))
    return b"".join(pieces)
