"""Recall search with identifiers as models type them: followed by `:` or `.`.

After a replay, identifiers the archive holds (record ids, paths, error names, the planted
codes) are searched through ctxgate's own archive search (`SessionStore.search_archive`, the
index recall answers from), each once as `ID:` and once as `ID.`. A search hits when one of the
messages it returns holds the identifier.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bench.evaluation.artifacts import PATTERNS
from bench.evaluation.corpus import Message
from storage import SessionKey, SessionStore

Fraction = tuple[int, int]  # (hits, searches)
MAX_IDENTIFIERS = 24  # per session: spread over the archive, newest and oldest alike
HITS = 5  # what the recall tool asks the index for
KINDS = ("id", "path", "error")


def identifiers(archive: Mapping[int, Message], extra: Sequence[str] = ()) -> list[str]:
    """Up to MAX_IDENTIFIERS distinct identifiers of the archived messages, spread evenly."""
    found: list[str] = list(dict.fromkeys(extra))
    for position in sorted(archive):
        text = _text(archive[position])
        for kind in KINDS:
            for match in PATTERNS[kind].finditer(text):
                if match.group(0) not in found:
                    found.append(match.group(0))
    if len(found) <= MAX_IDENTIFIERS:
        return found
    step = len(found) / MAX_IDENTIFIERS
    return [found[int(i * step)] for i in range(MAX_IDENTIFIERS)]


def _text(message: Message) -> str:
    """Every string of a message (its content, its tool calls' names and arguments)."""
    return "\n".join(_leaves(message))


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(_decoded(item) if key == "arguments" else item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def _decoded(arguments: Any) -> Any:
    """Tool-call arguments as the values they encode (their JSON escapes are not text)."""
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def search_hits(url: str, key: SessionKey, wanted: Sequence[str]) -> tuple[Fraction, list[str]]:
    """(searches that returned a message holding the identifier, searches), and the queries
    that missed."""
    return asyncio.run(_search_all(url, key, wanted)) if wanted else ((0, 0), [])


async def _search_all(
    url: str, key: SessionKey, wanted: Sequence[str]
) -> tuple[Fraction, list[str]]:
    store = await SessionStore.open(url)
    missed: list[str] = []
    searches = 0
    try:
        for identifier in wanted:
            for punctuation in (":", "."):
                query = f"{identifier}{punctuation}"
                found = await store.search_archive(key, query, HITS)
                searches += 1
                if not any(identifier in _text(a.message) for a in found):
                    missed.append(query)
    finally:
        await store.close()
    return (searches - len(missed), searches), missed
