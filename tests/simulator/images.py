"""Providers' refusals of inline images that are too large (bytes or pixels)."""

from __future__ import annotations

import base64
import io
import re
from typing import Any

from .models import Fail, ModelSpec

_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,(.*)$", re.DOTALL)


def image_error(spec: ModelSpec, body: Any) -> Fail | None:
    """The provider's 400 for the first inline image over the spec's limits, else None."""
    if spec.image_max_bytes is None and spec.image_max_px is None:
        return None
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            raw = _inline(part)
            if raw is None:
                continue
            problem = _problem(spec, raw)
            if problem is not None:
                return _refusal(spec, i, j, problem)
    return None


def _inline(part: Any) -> bytes | None:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    url = (part.get("image_url") or {}).get("url")
    match = _DATA_URL.match(url) if isinstance(url, str) else None
    return base64.b64decode(match.group(1)) if match else None


def _problem(spec: ModelSpec, raw: bytes) -> tuple[str, int, int] | None:
    if spec.image_max_bytes is not None and len(raw) > spec.image_max_bytes:
        return "bytes", len(raw), spec.image_max_bytes
    if spec.image_max_px is not None:
        from PIL import Image

        side = max(Image.open(io.BytesIO(raw)).size)
        if side > spec.image_max_px:
            return "pixels", side, spec.image_max_px
    return None


def _refusal(spec: ModelSpec, i: int, j: int, problem: tuple[str, int, int]) -> Fail:
    kind, found, limit = problem
    if spec.dialect.startswith("anthropic"):
        where = f"messages.{i}.content.{j}.image.source.base64"
        if kind == "bytes":
            text = f"{where}.data: image exceeds 5 MB maximum: {found} bytes > {limit} bytes"
        else:
            text = f"{where}: image dimensions exceed max allowed size: {limit} pixels"
        error = {"type": "invalid_request_error", "message": text}
        return Fail(400, {"type": "error", "error": error})
    if kind == "bytes":
        text = (
            f"Invalid 'messages[{i}].content[{j}].image_url'. You uploaded an image that is too "
            f"large ({found} bytes). The max size is {limit / 1_000_000:g}MB."
        )
    else:
        text = (
            f"Invalid 'messages[{i}].content[{j}].image_url'. The image exceeds the maximum "
            f"dimension of {limit} pixels."
        )
    param = f"messages.[{i}].content.[{j}].image_url"
    error = {"message": text, "type": "invalid_request_error", "param": param, "code": None}
    return Fail(400, {"error": error})
