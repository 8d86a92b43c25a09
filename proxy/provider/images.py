"""Images a provider refused as too large, shrunk and re-encoded for one retry.

    limit = image_limit(status, body)         # pure: None unless the error is about image size
    view = shrink_images(view, limit)         # None when no image could be made smaller

Providers state the limit in their own words: Anthropic "image exceeds 5 MB maximum: N bytes >
M bytes" and "image dimensions exceed max allowed size: 8000 pixels"; OpenAI "… image … too
large … max size is 20MB" or "… exceeds the maximum dimension …"; Bedrock and Vertex similar.
The shrunk image keeps its aspect ratio, fits the pixel limit, and is re-encoded (JPEG, or PNG
when it has transparency) under the byte limit. Images given by URL are left alone: only the
provider can fetch them.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from dataclasses import dataclass
from typing import Any, cast

from compression import Message

DEFAULT_BYTES = 4 * 1024 * 1024  # under every provider's per-image limit
DEFAULT_PIXELS = 8000
_MIN_PIXELS = 512

_IMAGE_CONTEXT = re.compile(r"\bimage", re.IGNORECASE)
_TOO_LARGE = re.compile(
    r"too large|exceeds?|larger than|maximum (allowed )?size|max(imum)? (allowed )?dimension",
    re.IGNORECASE,
)
_EXACT_BYTES = re.compile(r">\s*(\d+)\s*bytes", re.IGNORECASE)
_MEGABYTES = re.compile(r"(\d+(?:\.\d+)?)\s*MB", re.IGNORECASE)
_PIXELS = re.compile(r"(\d{3,5})\s*(?:pixels|px)", re.IGNORECASE)
_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ImageLimit:
    max_bytes: int  # encoded bytes an image may have
    max_pixels: int  # the longest side an image may have


def image_limit(status: int, body: bytes) -> ImageLimit | None:
    """The limit an error answer states for images, when it refuses an image as too large."""
    if status not in (400, 413, 422):
        return None
    text = body[:8000].decode("utf-8", "replace")
    if not _IMAGE_CONTEXT.search(text) or not _TOO_LARGE.search(text):
        return None
    if "token" in text.lower() and "context" in text.lower():
        return None  # a context overflow that mentions images is the overflow path's
    return ImageLimit(_stated_bytes(text), _stated_pixels(text))


def _stated_bytes(text: str) -> int:
    exact = _EXACT_BYTES.search(text)
    if exact is not None:
        return min(int(exact.group(1)), DEFAULT_BYTES)
    megabytes = _MEGABYTES.search(text)
    if megabytes is not None:
        return min(int(float(megabytes.group(1)) * 1_000_000 * 0.95), DEFAULT_BYTES)
    return DEFAULT_BYTES


def _stated_pixels(text: str) -> int:
    match = _PIXELS.search(text)
    if match is None:
        return DEFAULT_PIXELS
    return max(_MIN_PIXELS, min(int(match.group(1)), DEFAULT_PIXELS))


def shrink_images(view: list[Message], limit: ImageLimit) -> list[Message] | None:
    """`view` with every inline image over `limit` shrunk; None when none could be."""
    changed = False
    out: list[Message] = []
    for message in view:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = [_shrunk_part(cast(dict[str, Any], part), limit) for part in content]
        if any(new is not old for new, old in zip(parts, content, strict=True)):
            changed = True
            message = cast(Message, {**message, "content": parts})
        out.append(message)
    return out if changed else None


def _shrunk_part(part: dict[str, Any], limit: ImageLimit) -> dict[str, Any]:
    if part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
        url = part["image_url"].get("url")
        match = _DATA_URL.match(url) if isinstance(url, str) else None
        if match is None:
            return part
        smaller = _shrunk(_decode(match.group(2)), limit)
        if smaller is None:
            return part
        data, media = smaller
        encoded = base64.b64encode(data).decode("ascii")
        return {**part, "image_url": {**part["image_url"], "url": f"data:{media};base64,{encoded}"}}
    source = part.get("source")
    if part.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
        smaller = _shrunk(_decode(source.get("data")), limit)
        if smaller is None:
            return part
        data, media = smaller
        encoded = base64.b64encode(data).decode("ascii")
        return {**part, "source": {**source, "media_type": media, "data": encoded}}
    return part


def _decode(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return None


def _shrunk(raw: bytes | None, limit: ImageLimit) -> tuple[bytes, str] | None:
    """The image re-encoded within `limit`, or None when it is within it (or unreadable)."""
    if raw is None:
        return None
    from PIL import Image, UnidentifiedImageError  # imported on first use: rarely needed

    try:
        opened = Image.open(io.BytesIO(raw))
        opened.load()
        image: Image.Image = opened
    except (UnidentifiedImageError, OSError, ValueError):
        return None
    if len(raw) <= limit.max_bytes and max(image.size) <= limit.max_pixels:
        return None
    if max(image.size) > limit.max_pixels:
        image.thumbnail((limit.max_pixels, limit.max_pixels))
    alpha = image.mode in ("RGBA", "LA") or "transparency" in image.info
    for attempt in range(8):
        buffer = io.BytesIO()
        if alpha:
            image.save(buffer, format="PNG", optimize=True)
        else:
            image.convert("RGB").save(buffer, format="JPEG", quality=85 - 8 * attempt)
        if buffer.tell() <= limit.max_bytes:
            return buffer.getvalue(), "image/png" if alpha else "image/jpeg"
        width, height = image.size
        image = image.resize((max(1, width * 3 // 4), max(1, height * 3 // 4)))
    return None
