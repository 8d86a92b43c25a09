"""The checks every compressed view must pass before it may be sent upstream.

A violation is a bug in the compressor, never a result: callers treat the exception as
"compression failed" and forward the original view.
"""

from __future__ import annotations

from collections.abc import Sequence

from compression.messages.toolpairs import call_id, pair_tool_calls, tool_calls_of
from compression.messages.types import Message

HEAD_ROLES = ("system", "developer")


class CompressionInvariantError(AssertionError):
    """A compressed view broke a structural rule of the Chat Completions API."""


def check_invariants(messages: Sequence[Message]) -> None:
    """Raise `CompressionInvariantError` unless the list is a well-formed conversation.

    Rules: not empty; a system message, if any, comes first; every assistant `tool_calls[].id`
    is answered by a tool message before the next non-tool message (the trailing in-flight
    assistant message excepted); no tool result without its call.
    """
    if not messages:
        raise CompressionInvariantError("the message list is empty")
    roles = [message.get("role") for message in messages]
    if "system" in roles and roles[0] not in HEAD_ROLES:
        raise CompressionInvariantError(f"system message is not first (first is {roles[0]!r})")
    pairing = pair_tool_calls(messages)
    for index, role in enumerate(roles):
        if role == "tool" and index not in pairing.owner:
            identifier = messages[index].get("tool_call_id")
            raise CompressionInvariantError(
                f"tool result at {index} (tool_call_id={identifier!r}) answers no pending call"
            )
        calls = tool_calls_of(messages[index]) if role == "assistant" else []
        if not calls or index == pairing.in_flight:
            continue
        answered = pairing.answered.get(index, frozenset())
        for position, call in enumerate(calls):
            if position not in answered:
                raise CompressionInvariantError(
                    f"tool call {call_id(call)!r} of message {index} has no result"
                )
