"""A saved session as the requests its agent sent, in the agent's own wire API (pure).

An agent sends its whole history on every request and the history only grows, so a saved
transcript holds every request: the request before each answer of the model is the history up
to that answer. Readers give the transcript's items; `growing` cuts the requests out of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]


class RecordingError(ValueError):
    """A file that is not a saved session of a known format, or one that holds no request."""


@dataclass(frozen=True, slots=True)
class Recording:
    """One session: the request bodies its agent sent, in order."""

    name: str  # the session's id, or its file's name
    source: str  # the format it was read from ("claude-code", "codex", …)
    api: str  # the wire API of the bodies: chat, responses, messages, gemini
    model: str
    bodies: tuple[Body, ...]

    def with_model(self, model: str) -> Recording:
        """The same requests, sent for `model` (Gemini's model is in its path, not the body)."""
        if self.api == "gemini":
            bodies = self.bodies
        else:
            bodies = tuple({**body, "model": model} for body in self.bodies)
        return Recording(self.name, self.source, self.api, model, bodies)


def growing(
    base: Body, key: str, items: Sequence[Any], is_answer: Callable[[Any], bool]
) -> tuple[Body, ...]:
    """The request before each answer: `base` with `key` set to the items up to the first of
    each run of answer items (the model's answer may span several items: text, calls)."""
    bodies = []
    for i in range(1, len(items)):
        if is_answer(items[i]) and not is_answer(items[i - 1]):
            bodies.append({**base, key: list(items[:i])})
    return tuple(bodies)


def text_parts(content: Any) -> str:
    """The text of a content value that is a string or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return ""
