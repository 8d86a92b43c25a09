"""Where a kept request body's array and its entries lie in its bytes, when orjson writes the
parsed body back as exactly those bytes (proxy.doors.grown_bodies keeps only such bodies).

Imports orjson and proxy.doors.bodies only.
"""

from __future__ import annotations

import orjson

from proxy.doors.bodies import JsonObject


def frame_of(raw: bytes, body: JsonObject, array: str) -> tuple[int, int] | None:
    """Where `array`'s entries start and end in `raw`, when orjson writes everything of `body`
    but them back as the bytes around them: the check a body's writer is known by, taken as
    the body is kept (the entries' own check waits until the body is looked for)."""
    keys = list(body)
    at = keys.index(array)
    before = {k: body[k] for k in keys[:at]}
    after = {k: body[k] for k in keys[at + 1 :]}
    try:
        opening = orjson.dumps(before)[:-1] + b"," if before else b"{"
        head = opening + orjson.dumps(array) + b":["
        tail = b"]," + orjson.dumps(after)[1:] if after else b"]}"
    except orjson.JSONEncodeError:
        return None
    if len(raw) < len(head) + len(tail) or not raw.startswith(head) or not raw.endswith(tail):
        return None
    return len(head), len(raw) - len(tail)


def layout_of(raw: bytes, body: JsonObject, array: str) -> tuple[int, tuple[int, ...]] | None:
    """Where `array`'s last entry ends in `raw`, and where each entry starts, when orjson
    writes `body` back as `raw`. orjson writes each value of an object or array as it writes
    it alone, so writing every entry once is both the check of the array's bytes and where
    each entry starts: the array is written once, not once for the check and again for the
    offsets."""
    frame = frame_of(raw, body, array)
    return None if frame is None else laid_entries(raw, body, array, *frame)


def laid_entries(
    raw: bytes, body: JsonObject, array: str, start: int, end: int
) -> tuple[int, tuple[int, ...]] | None:
    """`layout_of`, the bytes around the entries (`raw[:start]`, `raw[end:]`) checked."""
    try:
        written = [orjson.dumps(entry) for entry in body[array]]
    except orjson.JSONEncodeError:
        return None
    joined = b",".join(written)
    if end - start != len(joined) or raw[start:end] != joined:
        return None
    starts = []
    for entry in written:
        starts.append(start)
        start += len(entry) + 1
    return end, tuple(starts)
