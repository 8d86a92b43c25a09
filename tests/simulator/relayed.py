"""The simulator's answers on the endpoints ctxgate relays without reading them: embeddings, text
completions (plain and streamed), file uploads and audio transcriptions. Deterministic, in
OpenAI's shapes, so a test can compare an answer through ctxgate with a direct one."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .endpoints import openai_error
from .exchange import Exchange, json_bytes

RELAYED_PATHS = frozenset(
    {
        "/v1/embeddings",
        "/v1/completions",
        "/v1/files",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
    }
)
_DIMENSIONS = 8
_FILENAME = re.compile(rb'filename="([^"]*)"')


def is_relayed_path(norm: str) -> bool:
    return norm in RELAYED_PATHS


async def send_relayed(exchange: Exchange, norm: str) -> None:
    if exchange.rec.method != "POST":
        error = openai_error(f"Method {exchange.rec.method} not allowed on {norm}.")
        await exchange.send_json(405, error, outcome="bad_request")
    elif norm == "/v1/embeddings":
        await _embeddings(exchange)
    elif norm == "/v1/completions":
        await _completions(exchange)
    elif norm == "/v1/files":
        await _file_upload(exchange)
    else:
        await _transcription(exchange)


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 255, 6) for b in digest[:_DIMENSIONS]]


def _inputs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(item) for item in value]
    return []


async def _embeddings(exchange: Exchange) -> None:
    body = exchange.rec.body
    if not isinstance(body, dict) or "input" not in body or "model" not in body:
        error = openai_error("'input' and 'model' are required.", param="input")
        await exchange.send_json(400, error, outcome="bad_request")
        return
    texts = _inputs(body["input"])
    payload = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _vector(text)}
            for i, text in enumerate(texts)
        ],
        "model": body["model"],
        "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
    }
    await exchange.send_json(200, payload, outcome="reply")


def _completion_text(prompt: Any) -> str:
    return "completed: " + " ".join(_inputs(prompt))[:60]


async def _completions(exchange: Exchange) -> None:
    body = exchange.rec.body
    if not isinstance(body, dict) or "model" not in body:
        error = openai_error("'model' is required.", param="model")
        await exchange.send_json(400, error, outcome="bad_request")
        return
    text = _completion_text(body.get("prompt"))
    base = {"id": "cmpl-sim1", "object": "text_completion", "created": 0, "model": body["model"]}
    if body.get("stream") is not True:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        await exchange.send_json(200, {**base, "choices": [choice], "usage": usage}, "reply")
        return
    await exchange.start_stream("stream")
    for word in text.split(" "):
        choice = {"index": 0, "text": word + " ", "logprobs": None, "finish_reason": None}
        frame = b"data: " + json_bytes({**base, "choices": [choice]}) + b"\n\n"
        await exchange.send_frame(frame, more=True)
    last = {"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}
    await exchange.send_frame(
        b"data: " + json_bytes({**base, "choices": [last]}) + b"\n\n", more=True
    )
    await exchange.send_frame(b"data: [DONE]\n\n", more=False)


def _form_field(raw: bytes, name: str) -> str | None:
    match = re.search(rb'name="' + name.encode() + rb'"\r\n\r\n([^\r]*)\r\n', raw)
    return match.group(1).decode() if match else None


def _file_part(raw: bytes) -> tuple[str, bytes]:
    """The uploaded file's name and bytes (the part that has a filename)."""
    match = _FILENAME.search(raw)
    if match is None:
        return "", b""
    start = raw.find(b"\r\n\r\n", match.end()) + 4
    boundary = raw[: raw.find(b"\r\n")]
    end = raw.find(b"\r\n" + boundary, start)
    return match.group(1).decode(), raw[start:end]


async def _file_upload(exchange: Exchange) -> None:
    raw = exchange.rec.raw
    name, content = _file_part(raw)
    payload = {
        "id": "file-sim-" + hashlib.sha256(content).hexdigest()[:12],
        "object": "file",
        "bytes": len(content),
        "created_at": 0,
        "filename": name,
        "purpose": _form_field(raw, "purpose"),
        "status": "processed",
    }
    await exchange.send_json(200, payload, outcome="reply")


async def _transcription(exchange: Exchange) -> None:
    name, content = _file_part(exchange.rec.raw)
    text = f"{len(content)} bytes of {name} in {_form_field(exchange.rec.raw, 'model')}"
    await exchange.send_json(200, {"text": text}, outcome="reply")
