"""Reading and rewriting message content, whatever shape the client sent it in.

Content is a string, a list of typed parts (text, image_url, …) or None. These helpers never
mutate a message: they return new values and leave the copying decision to the caller.
"""

from __future__ import annotations

from typing import Any

from compression.messages.types import ContentPart, Message

IMAGE_PLACEHOLDER = "[image omitted]"


def content_text(message: Message) -> str:
    """The readable text of a message: text parts joined, images as a short placeholder."""
    content: Any = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return str(content)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    kind = part.get("type")
    if kind == "text" or (kind is None and isinstance(part.get("text"), str)):
        text = part.get("text")
        return text if isinstance(text, str) else ""
    if kind in ("image_url", "input_image", "image"):
        return IMAGE_PLACEHOLDER
    return f"[{kind} omitted]"


def has_text(message: Message) -> bool:
    return bool(content_text(message).strip())


def image_count(message: Message) -> int:
    content: Any = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and _is_image(part))


def _is_image(part: dict[str, Any]) -> bool:
    return part.get("type") in ("image_url", "input_image", "image")


def without_images(message: Message, placeholder: str = IMAGE_PLACEHOLDER) -> Message:
    """A copy of the message whose image parts are text placeholders (same object if none)."""
    content: Any = message.get("content")
    if not isinstance(content, list) or not any(
        isinstance(part, dict) and _is_image(part) for part in content
    ):
        return message
    parts: list[ContentPart] = []
    for part in content:
        if isinstance(part, dict) and _is_image(part):
            parts.append({"type": "text", "text": placeholder})
        else:
            parts.append(part)
    changed = message.copy()
    changed["content"] = parts
    return changed


def with_text(message: Message, text: str) -> Message:
    """A copy of the message whose content is the given plain text."""
    changed = message.copy()
    changed["content"] = text
    return changed


def with_prefix(message: Message, prefix: str) -> Message:
    """A copy of the message with text put before its content, keeping non-text parts."""
    content: Any = message.get("content")
    changed = message.copy()
    if isinstance(content, list):
        changed["content"] = [{"type": "text", "text": prefix}, *content]
    elif content:
        changed["content"] = f"{prefix}\n\n{content}"
    else:
        changed["content"] = prefix
    return changed


def clip_middle(text: str, limit: int, head_share: float = 0.7) -> str:
    """Keep the head and tail of a long text around a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - 60, 0)
    head = int(keep * head_share)
    tail = keep - head
    omitted = len(text) - head - tail
    end = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n…[{omitted:,} chars omitted]…\n{end}"


def line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)
