"""A client's canned opening: few-shot example exchanges and acknowledged context (pure).

Some clients open every conversation with the same worked examples before the real request,
close them with a reset the model acknowledges, then send context blocks each answered by an
acknowledgement. aider, for one:

    system
    user  "Change the greeting to be more casual"     example exchanges (1 to 4)
    asst  "Ok, I will: … show_greeting.py …"
    user  "I switched to a new code base. …"          a reset, answered by a bare "Ok."
    asst  "Ok."
    user  "Here are summaries of some files …"        context, each answered on one line
    asst  "Ok, I won't try and edit those files …"
    user  <the real request>                          where the conversation starts

That opening is part of the fixed head: it is not the user's request, and it is not
summarized. It is recognised only in this shape (examples, then a reset answered by a bare
"Ok."), which a client sends whole with its first request, so the answer for a conversation
does not change as it grows. A conversation whose first reply happens to be a short "Ok" is not
taken for one (no example exchange before it), nor a text agent's command outputs sent back as
user messages. A real conversation whose second to fifth reply is a bare "Ok." is: its first
exchanges are then kept verbatim (within a share of the window) rather than summarized.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from compression.messages.content import content_text
from compression.messages.toolpairs import tool_calls_of
from compression.messages.types import Message
from compression.summary.handoff import handoff_text
from compression.verbatim.observations import is_observation

MAX_EXAMPLES = 4  # example exchanges before the reset
ACK_CHARS = 120  # "Ok, I will use these files as references."
_ACK = re.compile(
    r"(?:ok(?:ay)?|understood|got it|noted|sure|alright|acknowledged)\b", re.IGNORECASE
)
_BARE_ACK = re.compile(r"ok(?:ay)?[.!]?", re.IGNORECASE)


def preamble_end(messages: Sequence[Message]) -> int:
    """The index just past the canned opening; past the system messages when there is none."""
    start = system_end(messages)
    at = start
    examples = 0
    while examples < MAX_EXAMPLES and _exchange(messages, at) and not _ack(messages[at + 1]):
        if is_observation(messages, at):
            return start  # a text agent's command output: work, not an example
        examples += 1
        at += 2
    if not examples or not _exchange(messages, at) or not _bare_ack(messages[at + 1]):
        return start
    at += 2
    while _exchange(messages, at) and _ack(messages[at + 1]):
        at += 2
    return at


def fixed_end(messages: Sequence[Message], tokens: Sequence[int], cap: int) -> int:
    """The end of the opening kept verbatim: the canned opening, stopped at the last exchange
    that keeps it within `cap` tokens (what does not fit is summarized like the rest)."""
    at = system_end(messages)
    end = preamble_end(messages)
    used = 0
    while at < end and used + tokens[at] + tokens[at + 1] <= cap:
        used += tokens[at] + tokens[at + 1]
        at += 2
    return at


def system_end(messages: Sequence[Message]) -> int:
    end = 0
    while end < len(messages) and messages[end].get("role") in ("system", "developer"):
        end += 1
    return end


def _exchange(messages: Sequence[Message], at: int) -> bool:
    """A user message answered in text (no tool call) by the next message."""
    if at + 1 >= len(messages):
        return False
    user, reply = messages[at], messages[at + 1]
    return (
        user.get("role") == "user"
        and reply.get("role") == "assistant"
        and not tool_calls_of(reply)
        and handoff_text(user) is None
        and handoff_text(reply) is None
    )


def _ack(message: Message) -> bool:
    """A one-line acknowledgement ("Ok.", "Ok, I will use these files as references.")."""
    text = content_text(message).strip()
    if not text or "\n" in text or len(text) > ACK_CHARS:
        return False
    return _ACK.match(text) is not None


def _bare_ack(message: Message) -> bool:
    return _BARE_ACK.fullmatch(content_text(message).strip()) is not None
