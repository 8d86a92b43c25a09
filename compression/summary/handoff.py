"""The handoff message: rendering a summary into the conversation and reading it back.

    [CONTEXT COMPACTION — REFERENCE ONLY] …        reference-only prefix
    <summary body>
    ## User Messages (verbatim, oldest first)      carried user messages
    ## Files (the newest read of each, verbatim)   what the agent last read of files it uses
    ## Working Set (…)                             what the task works on, and why
    ## Your Last Reply (verbatim)                  the newest assistant reply, if carried
    ## Anchors (exact ids, paths and names …)      ids/paths/errors of the compacted turns
    --- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---
    <original text of a tail message>              only when the summary was merged into it

Reading it back lets the next compression update the summary instead of summarizing a
summary, and carry the user's words and the anchors verbatim again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compression.messages.content import content_text
from compression.messages.types import Message
from compression.summary.prompts import (
    ANCHORS_HEADER,
    ARCHIVE_OPEN,
    END_MARKER,
    FILE_CLOSE,
    FILE_OPEN,
    FILES_HEADER,
    IN_PROGRESS_MARKER,
    LAST_REPLY_HEADER,
    LEGACY_USER_CLOSE,
    LEGACY_USER_OPEN,
    RECALLED_CLOSE,
    RECALLED_OPEN,
    REPLY_CLOSE,
    REPLY_OPEN,
    SUMMARY_PREFIX,
    USER_CLOSE,
    USER_MESSAGES_HEADER,
    USER_OPEN,
    WORKING_SET_HEADER,
)
from compression.verbatim.anchors import AnchorIndex, parse_anchors, render_anchors

# `- named by the user, edited: a.py, b.py`: reasons are plain words, names hold no space.
_WORKING_LINE = re.compile(r"- ([a-z][a-z -]*(?:, [a-z][a-z -]*)*): (\S.*)")


@dataclass(frozen=True, slots=True)
class Handoff:
    body: str
    user_messages: tuple[str, ...] = ()  # carried verbatim, oldest first
    last_reply: str | None = None
    anchors: AnchorIndex = AnchorIndex()
    files: tuple[tuple[str, str], ...] = ()  # (path, newest read's text), carried verbatim
    working: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (entity, why), the working set


@dataclass(frozen=True, slots=True)
class ParsedHandoff:
    handoff: Handoff
    remainder: str  # text of a message the summary was merged into ("" when standalone)


def render_handoff(handoff: Handoff) -> str:
    parts = [SUMMARY_PREFIX, handoff.body.strip()]
    if handoff.user_messages:
        blocks = [f"{USER_OPEN}\n{text}\n{USER_CLOSE}" for text in handoff.user_messages]
        parts.append(USER_MESSAGES_HEADER + "\n" + "\n".join(blocks))
    if handoff.files:
        files = [f"{FILE_OPEN}{path}>>>\n{text}\n{FILE_CLOSE}" for path, text in handoff.files]
        parts.append(FILES_HEADER + "\n" + "\n".join(files))
    if handoff.working:
        parts.append(WORKING_SET_HEADER + "\n" + render_working(handoff.working))
    if handoff.last_reply is not None:
        parts.append(f"{LAST_REPLY_HEADER}\n{REPLY_OPEN}\n{handoff.last_reply}\n{REPLY_CLOSE}")
    if handoff.anchors:
        # Last, so a header quoted inside a carried message can never be taken for it.
        parts.append(render_anchors(handoff.anchors, ANCHORS_HEADER))
    parts.append(END_MARKER)
    return "\n\n".join(parts)


def handoff_text(message: Message) -> str | None:
    """The text of a message if it carries a handoff summary, else None."""
    content: Any = message.get("content")
    if isinstance(content, str):
        return content if content.startswith(SUMMARY_PREFIX) else None
    if isinstance(content, list) and content and isinstance(content[0], dict):
        first = content[0].get("text")
        if isinstance(first, str) and first.startswith(SUMMARY_PREFIX):
            return content_text(message)
    return None


def parse_handoff(text: str) -> ParsedHandoff | None:
    if not text.startswith(SUMMARY_PREFIX):
        return None
    end = text.find(END_MARKER)
    if end < 0:
        body = _without_archive_line(text[len(SUMMARY_PREFIX) :]).strip()
        return ParsedHandoff(Handoff(body=body), "")
    inner = _without_archive_line(text[len(SUMMARY_PREFIX) : end])
    remainder = text[end + len(END_MARKER) :].lstrip("\n")
    anchors = AnchorIndex()
    at = inner.rfind("\n" + ANCHORS_HEADER + "\n")
    if at >= 0:
        anchors = parse_anchors(inner[at + len(ANCHORS_HEADER) + 2 :])
        inner = inner[:at]
    cut = min(
        (
            found
            for found in (
                inner.find(USER_MESSAGES_HEADER),
                inner.find(FILES_HEADER),
                inner.find(LAST_REPLY_HEADER),
                inner.find(WORKING_SET_HEADER),
            )
            if found >= 0
        ),
        default=len(inner),
    )
    handoff = Handoff(
        body=inner[:cut].strip(),
        user_messages=tuple(_user_blocks(inner)),
        last_reply=next(iter(_blocks(inner, REPLY_OPEN, REPLY_CLOSE)), None),
        anchors=anchors,
        files=tuple(_files(inner)),
        working=tuple(_working(inner)),
    )
    return ParsedHandoff(handoff, remainder)


def _without_archive_line(inner: str) -> str:
    """The summary without the line of handles under its prefix: the proxy rewrites that line
    after every compression, so it is not part of what the next summary updates."""
    stripped = inner.lstrip("\n")
    if not stripped.startswith(ARCHIVE_OPEN):
        return inner
    end = stripped.find("\n")
    return "" if end < 0 else stripped[end + 1 :]


def _blocks(text: str, opening: str, closing: str) -> list[str]:
    found: list[str] = []
    position = text.find(opening)
    while position >= 0:
        start = position + len(opening) + 1
        stop = text.find(f"\n{closing}", start)
        if stop < 0:
            break
        found.append(text[start:stop])
        position = text.find(opening, stop + len(closing))
    return found


def _user_blocks(inner: str) -> list[str]:
    """The carried user messages: read in their own section only, so a carried file or the
    reply that holds the same markers is never taken for one."""
    at = inner.find(USER_MESSAGES_HEADER)
    if at < 0:
        return []
    ends = [inner.find(h, at) for h in (FILES_HEADER, WORKING_SET_HEADER, LAST_REPLY_HEADER)]
    section = inner[at : min((e for e in ends if e >= 0), default=len(inner))]
    if USER_OPEN in section:
        return _blocks(section, USER_OPEN, USER_CLOSE)
    return _blocks(section, LEGACY_USER_OPEN, LEGACY_USER_CLOSE)


def _files(inner: str) -> list[tuple[str, str]]:
    """The carried file blocks: `<<<file PATH>>>` … `<<<end file>>>`."""
    at = inner.find(FILES_HEADER)
    if at < 0:
        return []
    section = inner[at:]
    found: list[tuple[str, str]] = []
    position = section.find(FILE_OPEN)
    while position >= 0:
        line_end = section.find("\n", position)
        stop = section.find(f"\n{FILE_CLOSE}", line_end)
        if line_end < 0 or stop < 0:
            break
        path = section[position + len(FILE_OPEN) : line_end]
        if path.endswith(">>>"):
            found.append((path.removesuffix(">>>"), section[line_end + 1 : stop]))
        position = section.find(FILE_OPEN, stop + len(FILE_CLOSE))
    return found


def render_working(working: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """The working set's lines: the entities that share their reasons on one line, in order
    (`- edited, re-read: src/a.py, src/b.py`). One line per entity would write the same
    reasons again for each, in the handoff's room that the anchors share."""
    runs: list[tuple[tuple[str, ...], list[str]]] = []
    for name, why in working:
        if runs and runs[-1][0] == why:
            runs[-1][1].append(name)
        else:
            runs.append((why, [name]))
    return "\n".join(f"- {', '.join(why)}: {', '.join(names)}" for why, names in runs)


def _working(inner: str) -> list[tuple[str, tuple[str, ...]]]:
    """The working set's lines: `- reason, reason: NAME, NAME`, or one entity a line as
    `- NAME (reason, reason)` (how earlier handoffs wrote it)."""
    at = inner.rfind("\n" + WORKING_SET_HEADER + "\n")
    if at < 0:
        return []
    found: list[tuple[str, tuple[str, ...]]] = []
    for line in inner[at + len(WORKING_SET_HEADER) + 2 :].splitlines():
        grouped = _WORKING_LINE.fullmatch(line)
        if grouped is not None:
            why = tuple(grouped.group(1).split(", "))
            found += [(name, why) for name in grouped.group(2).split(", ") if name]
        elif line.startswith("- ") and line.endswith(")") and " (" in line:
            name, _, reasons = line[2:-1].rpartition(" (")
            found.append((name, tuple(reasons.split(", "))))
        else:
            break
    return found


def view_summaries(messages: Sequence[Message]) -> list[str]:
    """Bodies of every handoff summary present in a view, oldest first."""
    bodies: list[str] = []
    for message in messages:
        text = handoff_text(message)
        parsed = parse_handoff(text) if text is not None else None
        if parsed is not None:
            bodies.append(parsed.handoff.body)
    return bodies


def restated(text: str) -> str:
    return f"{IN_PROGRESS_MARKER}\n\n{text}"


def without_restatement(text: str) -> str:
    if text.startswith(IN_PROGRESS_MARKER):
        return text[len(IN_PROGRESS_MARKER) :].lstrip("\n")
    return text


def user_text(message: Message) -> str:
    """What the user wrote in a message, with any summary or restatement marker, and any
    passages ctxgate recalled into it, removed."""
    text = handoff_text(message)
    if text is not None:
        parsed = parse_handoff(text)
        return without_recalled(without_restatement(parsed.remainder)) if parsed else ""
    return without_recalled(without_restatement(content_text(message)))


def without_recalled(text: str) -> str:
    """`text` without the blocks of passages ctxgate appended to it."""
    while (start := text.find(RECALLED_OPEN)) >= 0:
        end = text.find(RECALLED_CLOSE, start)
        if end < 0:
            break
        text = text[:start].rstrip("\n") + text[end + len(RECALLED_CLOSE) :]
    return text
