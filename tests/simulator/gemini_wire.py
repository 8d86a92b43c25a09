"""The Gemini dialect's wire shapes: a `generateContent` body read as a chat body (for the token
count, the summary detector and the behaviour queue, which all speak chat), thought signatures,
and a ``Reply`` written as a `GenerateContentResponse` or as its SSE chunks.

Signatures are opaque to clients, as Google's are: ``base64(json{"n": nonce, "m": mac})`` where
the mac covers the nonce and, on a `functionCall` part, the call's name and arguments, so a
signature that was altered, invented, or moved to another call is told apart from one the
simulator issued. Google's documented dummies are accepted anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

from .models import Reply

DUMMY_SIGNATURES = ("skip_thought_signature_validator", "context_engineering_is_the_way_to_go")
STREAM_PIECE = 24  # characters of text per streamed chunk


def chat_body(body: Any, model: str) -> dict[str, Any]:
    """The Gemini body as a chat-completions body: `systemInstruction` as the system message,
    `model` contents as assistant messages (text and `tool_calls`), each `functionResponse` as
    a tool message, and the function declarations as chat tools."""
    if not isinstance(body, dict):
        return {"model": model, "messages": []}
    messages: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        text = "\n".join(_texts(system.get("parts")))
        if text:
            messages.append({"role": "system", "content": text})
    calls: list[str] = []
    for index, content in enumerate(body.get("contents") or []):
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "model":
            message, calls = _assistant(parts, index)
            messages.append(message)
            continue
        answered = 0
        for part in parts:
            response = part.get("functionResponse")
            if isinstance(response, dict):
                call_id = response.get("id") or (calls[answered] if answered < len(calls) else "")
                answered += 1
                messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": _result(response)}
                )
        texts = _texts(parts)
        images = [p for p in parts if "inlineData" in p or "fileData" in p]
        if texts or images:
            content_parts: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
            content_parts += [{"type": "image_url", "image_url": {"url": "gemini"}} for _ in images]
            messages.append({"role": "user", "content": content_parts})
    chat: dict[str, Any] = {"model": model, "messages": messages}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    config = body.get("generationConfig")
    if isinstance(config, dict) and isinstance(config.get("maxOutputTokens"), int):
        chat["max_tokens"] = config["maxOutputTokens"]
    return chat


def _texts(parts: Any) -> list[str]:
    return [
        p["text"]
        for p in parts or []
        if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    ]


def _assistant(parts: list[dict[str, Any]], index: int) -> tuple[dict[str, Any], list[str]]:
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(_texts(parts)) or None}
    calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)]
    ids = [str(c.get("id") or f"gpos_{index}_{k}") for k, c in enumerate(calls)]
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": str(call.get("name", "")),
                    "arguments": json.dumps(call.get("args") or {}),
                },
            }
            for call, call_id in zip(calls, ids, strict=True)
        ]
    return message, ids


def _result(response: dict[str, Any]) -> str:
    value = response.get("response")
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, str):
            return inner
    return json.dumps(value)


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        for declaration in tool.get("functionDeclarations") or []:
            if not isinstance(declaration, dict):
                continue
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            function = {
                "name": declaration.get("name"),
                "description": declaration.get("description", ""),
                "parameters": schema or {"type": "object"},
            }
            out.append({"type": "function", "function": function})
    return out


def thinking_requested(body: Any) -> bool:
    config = body.get("generationConfig") if isinstance(body, dict) else None
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    return isinstance(thinking, dict) and bool(thinking.get("includeThoughts"))


class Signer:
    """Issues thought signatures and tells whether one sent back is genuine."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)
        self.issued = 0

    def sign(self, part: dict[str, Any]) -> str:
        nonce = secrets.token_hex(8)
        self.issued += 1
        payload = {"n": nonce, "m": self._mac(nonce, part)}
        return base64.b64encode(json.dumps(payload).encode()).decode()

    def valid(self, signature: Any, part: dict[str, Any]) -> bool:
        if signature in DUMMY_SIGNATURES:
            return True
        if not isinstance(signature, str):
            return False
        try:
            payload = json.loads(base64.b64decode(signature, validate=True))
        except ValueError:
            return False
        if not isinstance(payload, dict) or not isinstance(payload.get("n"), str):
            return False
        expected = self._mac(payload["n"], part)
        return hmac.compare_digest(str(payload.get("m", "")), expected)

    def _mac(self, nonce: str, part: dict[str, Any]) -> str:
        call = part.get("functionCall")
        bound = ""
        if isinstance(call, dict):
            bound = json.dumps([call.get("name"), call.get("args") or {}], sort_keys=True)
        return hmac.new(self._secret, f"{nonce}|{bound}".encode(), hashlib.sha256).hexdigest()


def reply_parts(
    reply: Reply, thinking: bool, signer: Signer, call_ids: bool
) -> list[dict[str, Any]]:
    """The answer's parts: a thought (when asked for), the text, the calls; the signature on
    the first call, else on the last part."""
    parts: list[dict[str, Any]] = []
    if thinking and reply.reasoning_content:
        parts.append({"text": reply.reasoning_content, "thought": True})
    if reply.content:
        parts.append({"text": reply.content})
    for call in reply.tool_calls or []:
        function = call.get("function") if isinstance(call.get("function"), dict) else call
        arguments = function.get("arguments", {})
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
        made: dict[str, Any] = {"name": function.get("name"), "args": args}
        if call_ids and call.get("id"):
            made = {"id": call["id"], **made}
        parts.append({"functionCall": made})
    if not parts:
        parts.append({"text": ""})
    calls = [p for p in parts if "functionCall" in p]
    signed = calls[0] if calls else parts[-1]
    signed["thoughtSignature"] = signer.sign(signed)
    return parts


def finish_reason(reply: Reply) -> str:
    return "MAX_TOKENS" if reply.finish_reason == "length" else "STOP"


def response_object(
    parts: list[dict[str, Any]], reason: str, usage: dict[str, Any], model: str, response_id: str
) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": reason, "index": 0}
        ],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def stream_chunks(
    parts: list[dict[str, Any]], reason: str, usage: dict[str, Any], model: str, response_id: str
) -> list[dict[str, Any]]:
    """The chunks of a streamed answer: text in short pieces (a signature rides on its part's
    last piece), each call whole; every chunk carries the prompt's usage, the last one the
    finish reason and the whole usage."""
    pieces: list[dict[str, Any]] = []
    for part in parts:
        text = part.get("text")
        if not isinstance(text, str) or len(text) <= STREAM_PIECE:
            pieces.append(part)
            continue
        cuts = [text[i : i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)]
        extra = {k: v for k, v in part.items() if k != "text"}
        for i, cut in enumerate(cuts):
            last = i == len(cuts) - 1
            kept = extra if last else {k: v for k, v in extra.items() if k != "thoughtSignature"}
            pieces.append({"text": cut, **kept})
    prompt_only = {"promptTokenCount": usage["promptTokenCount"]}
    prompt_only["totalTokenCount"] = usage["promptTokenCount"]
    chunks = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [piece]}, "index": 0}
        if last:
            candidate["finishReason"] = reason
        chunks.append(
            {
                "candidates": [candidate],
                "usageMetadata": usage if last else prompt_only,
                "modelVersion": model,
                "responseId": response_id,
            }
        )
    return chunks


def sse(chunk: Any) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\r\n\r\n"


def google_error(code: int, message: str, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
