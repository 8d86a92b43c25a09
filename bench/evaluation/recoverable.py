"""Recoverable retention: what of the client's history a model can still read, verbatim in the
forwarded view or through a handle the view names and ctxgate's archive holds.

The handles a view names are read as the compressor writes them (compression/summary/handles.py):
the summary's "[Archived originals: m2-m40, m43 — …]" line and a rewritten message's "[archived:
m12]" suffix. The archive is what ctxgate's admin API serves (`GET
/admin/sessions/{scope}/{key}/archive`), fetched over HTTP by the replay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx

from bench.evaluation.artifacts import Message, message_text, view_text
from compression import parse_handles

Fraction = tuple[int, int]

_ARCHIVE_LINE = re.compile(r"\[Archived originals: ([^\]\n]*?)(?: \u2014[^\]\n]*)?\]")
_SUFFIX = re.compile(r"\[archived: (m\d+)\]")
NO_LIMIT = 10**9


def named_positions(view: Sequence[Message]) -> set[int]:
    """Every client position a handle in `view` names."""
    named: set[int] = set()
    for message in view:
        text = message_text(message)
        for line in _ARCHIVE_LINE.finditer(text):
            for item in line.group(1).split(","):
                named.update(parse_handles(item, limit=NO_LIMIT) or [])
        for suffix in _SUFFIX.finditer(text):
            named.update(parse_handles(suffix.group(1)) or [])
    return named


def fetch_archive(
    http: httpx.Client, root: str, admin_key: str, scope: str, key: str
) -> dict[int, Message]:
    """Position -> archived original, through the admin API (empty when the session is unknown)."""
    url = f"{root}/admin/sessions/{quote(scope, safe='')}/{quote(key, safe='/')}/archive"
    answer = http.get(url, headers={"authorization": f"Bearer {admin_key}"})
    if answer.status_code == 404:
        return {}
    answer.raise_for_status()
    return {int(row["position"]): row["message"] for row in answer.json()["data"]}


@dataclass
class Recoverable:
    """Per client message of the history (empty ones left out), where a model can read it."""

    messages: int = 0
    verbatim: int = 0  # its text is in the view as is
    reachable: int = 0  # not verbatim, but a handle in view names it and the archive holds it
    archived_unnamed: int = 0  # not verbatim, archived, but no handle in view names it
    lost: list[int] = field(default_factory=list)  # positions neither verbatim nor archived

    @property
    def recoverable(self) -> Fraction:
        return self.verbatim + self.reachable, self.messages

    @property
    def verbatim_share(self) -> Fraction:
        return self.verbatim, self.messages

    @property
    def with_archive(self) -> Fraction:
        """As `recoverable` if every archived position were named in the view."""
        return self.verbatim + self.reachable + self.archived_unnamed, self.messages


def recoverable_of(
    history: Sequence[Message], view: Sequence[Message], archive: Mapping[int, Message]
) -> Recoverable:
    text = view_text(view)
    named = named_positions(view)
    result = Recoverable()
    for position, message in enumerate(history):
        own = message_text(message)
        if not own.strip():
            continue
        result.messages += 1
        if own in text:
            result.verbatim += 1
            continue
        stored = archive.get(position)
        held = stored is not None and message_text(stored) == own
        if held and position in named:
            result.reachable += 1
        elif held:
            result.archived_unnamed += 1
        else:
            result.lost.append(position)
    return result


def pooled(items: Iterable[Recoverable]) -> Recoverable:
    total = Recoverable()
    for item in items:
        total.messages += item.messages
        total.verbatim += item.verbatim
        total.reachable += item.reachable
        total.archived_unnamed += item.archived_unnamed
        total.lost.extend(item.lost)
    return total
