"""Content parts of Responses items, to and from the compressor's chat parts (pure).

    input_text / output_text / text  ->  {"type": "text", "text": …}
    input_image, refusal             ->  kept as they are (the counter and the content
                                         helpers know them: an image costs a flat figure)
    input_file, audio, anything else ->  {"type": "image", ORIGINAL: <the part>}

Files and other binary parts stand in as an image so the token counter charges them a fixed
figure instead of the length of their base64, and so the prune pass that drops old images
drops them too; the part itself rides along under the private key and is put back verbatim.
A text part that carries more than its type and text (annotations, logprobs) keeps the
original under the key as well, so an unchanged text is emitted exactly as it came.
"""

from __future__ import annotations

from typing import Any, cast

from compression import ContentPart
from proxy.doors.responses.wire_shapes import Item
from proxy.doors.sse_data import text_at
from session.ports.frontdoor import ORIGINAL

TEXT_TYPES = frozenset({"input_text", "output_text", "text"})
KEPT_TYPES = frozenset({"input_image", "refusal"})
ChatContent = str | list[ContentPart] | None


def text_type(role: str | None) -> str:
    """The Responses text part type a message of this role carries."""
    return "output_text" if role == "assistant" else "input_text"


def chat_content(content: Any) -> ChatContent:
    """A Responses `content` (or function output) as chat content."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return [chat_part(part) for part in content]
    return [chat_part(content)]


def chat_part(part: Any) -> ContentPart:
    if not isinstance(part, dict):
        return cast(ContentPart, {"type": "image", ORIGINAL: part})
    kind, text = text_at(part, "type"), text_at(part, "text")
    if kind in TEXT_TYPES and text is not None:
        if len(part) == 2:
            return {"type": "text", "text": text}
        return cast(ContentPart, {"type": "text", "text": text, ORIGINAL: part})
    if kind in KEPT_TYPES:
        return cast(ContentPart, part)
    return cast(ContentPart, {"type": "image", ORIGINAL: part})


def wire_content(content: Any, role: str | None, template: Any) -> Any:
    """Chat content back as a Responses `content`; a string stays a string when the original
    content was one (or absent)."""
    if content is None:
        return "" if template is None or isinstance(template, str) else []
    if isinstance(content, str):
        if template is None or isinstance(template, str):
            return content
        return [{"type": text_type(role), "text": content}]
    if isinstance(content, list):
        return [wire_part(part, role) for part in content]
    return content


def wire_part(part: Any, role: str | None) -> Any:
    if not isinstance(part, dict):
        return part
    original = part.get(ORIGINAL)
    if part.get("type") == "text":
        text = part.get("text")
        if isinstance(original, dict):
            return original if original.get("text") == text else {**original, "text": text}
        return {"type": text_type(role), "text": text if isinstance(text, str) else ""}
    if original is not None:
        return original
    return part


def fresh_text(role: str, text: str) -> Item:
    """A new message item holding one text part."""
    return {"type": "message", "role": role, "content": [{"type": text_type(role), "text": text}]}
