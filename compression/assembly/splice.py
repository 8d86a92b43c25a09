"""Splicing the handoff summary into the view, keeping roles valid.

    head + [summary] + [restated newest user message] + tail

The summary takes the role that keeps user/assistant alternation: user after the system
prompt or after an assistant/tool turn, assistant after a user turn. When both roles would
collide with a neighbour, it is merged into the start of the next message instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from compression.messages.content import content_text, with_prefix, with_text
from compression.messages.types import Message, Role
from compression.summary.handoff import Handoff, handoff_text, render_handoff, restated, user_text
from compression.summary.prompts import IN_PROGRESS_MARKER


def assemble(
    head: Sequence[Message],
    handoff: Handoff,
    restate: Message | None,
    tail: Sequence[Message],
) -> list[Message]:
    summary_text = render_handoff(handoff)
    following: list[Message] = []
    if restate is not None:
        following.append(_restated(restate))
    following.extend(tail)
    role = summary_role(
        head[-1].get("role") if head else None, following[0].get("role") if following else None
    )
    if role is None:
        merged = with_prefix(following[0], summary_text)
        return [*head, merged, *following[1:]]
    return [*head, {"role": role, "content": summary_text}, *following]


def summary_role(before: str | None, after: str | None) -> Role | None:
    """The summary's role between two neighbours, or None to merge it into the next message."""
    if before in (None, "system", "developer"):
        # A conversation must open with a user turn after the system prompt.
        return "user" if after != "user" else None
    preferred: Role = "assistant" if before == "user" else "user"
    if preferred != after:
        return preferred
    other: Role = "user" if preferred == "assistant" else "assistant"
    return other if other != before else None


def _restated(message: Message) -> Message:
    """The newest user message, marked as the request still in progress."""
    if handoff_text(message) is None and isinstance(message.get("content"), list):
        if content_text(message).startswith(IN_PROGRESS_MARKER):
            return message
        return with_prefix(message, IN_PROGRESS_MARKER)
    return with_text(message, restated(user_text(message)))
