"""The provider's stand-in: an httpx transport that answers ctxgate's upstream calls itself.

Requests to the replay's provider host are measured (`meter.py`) and answered at once with a
short fixed answer in their API, with that measurement as usage. Summary calls go to a host
that answers 503 (ctxgate then writes its deterministic fallback summary), or, when a summary
model is configured, onward to that real upstream; what it bills is kept. Nothing else is
sent anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.doors.gemini.gemini_door import GeminiDoor
from proxy.doors.registry import BY_API, Door
from proxy.edge.replay.meter import Lane, Measured, Meter
from session.ledger.tiers import Split, split_of

PROVIDER_HOST = "provider.ctxgate-replay.invalid"
FALLBACK_HOST = "summary.ctxgate-replay.invalid"
ANSWER = "ok"
_GEMINI = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent)$")


@dataclass
class UpstreamDouble(httpx.AsyncBaseTransport):
    meter: Meter
    onward: httpx.AsyncBaseTransport | None = None  # the summary model's real upstream
    lane: Lane = field(default_factory=Lane)
    forwarded: list[Measured] = field(default_factory=list)  # since `take`
    summaries: list[Split] = field(default_factory=list)  # since `begin`

    def begin(self, lane: Lane | None = None) -> None:
        """Forget what was received; a new session starts with a new lane."""
        self.forwarded, self.summaries = [], []
        if lane is not None:
            self.lane = lane

    def take(self) -> list[Measured]:
        """The requests forwarded since the last call, forgotten here."""
        taken, self.forwarded = self.forwarded, []
        return taken

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == PROVIDER_HOST:
            raw = await request.aread()
            door = door_at(request.url.path)
            measured = self.meter.measure(door, raw, self.lane)
            self.forwarded.append(measured)
            return httpx.Response(200, content=answer(door.api, measured))
        if request.url.host == FALLBACK_HOST or self.onward is None:
            error = {"error": {"message": "no summary model in this replay", "type": "replay"}}
            return httpx.Response(503, content=orjson.dumps(error))
        return await self._onward(request, self.onward)

    async def _onward(
        self, request: httpx.Request, onward: httpx.AsyncBaseTransport
    ) -> httpx.Response:
        response = await onward.handle_async_request(request)
        content = await response.aread()
        await response.aclose()
        if response.status_code < 400:
            usage = door_at(request.url.path).usage(content)
            if usage is not None:
                self.summaries.append(split_of(usage))
        headers = [
            (k, v)
            for k, v in response.headers.items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx.Response(response.status_code, headers=headers, content=content)

    async def aclose(self) -> None:
        if self.onward is not None:
            await self.onward.aclose()


def door_at(path: str) -> Door:
    """The door whose upstream path `path` ends in."""
    found = _GEMINI.search(path)
    if found is not None:
        return GeminiDoor.at(found.group(1), stream=False)
    for door in BY_API.values():
        if door.api != "gemini" and path.endswith(door.upstream_path):
            return door
    return BY_API["chat"]


def answer(api: str, measured: Measured) -> bytes:
    """A one-word answer in `api`, billed as measured."""
    split, model = measured.split, measured.request.model
    cached = split.cache_read
    body: dict[str, Any]
    if api == "messages":
        body = {
            "id": "msg_replay", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": split.uncached, "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": split.cache_write, "output_tokens": 1,
            },
        }  # fmt: skip
    elif api == "responses":
        body = {
            "id": "resp_replay", "object": "response", "created_at": 0, "status": "completed",
            "model": model,
            "output": [{
                "type": "message", "id": "msg_replay", "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
            }],
            "usage": {
                "input_tokens": measured.prompt, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": measured.prompt + 1,
            },
        }  # fmt: skip
    elif api == "gemini":
        body = {
            "candidates": [{
                "content": {"role": "model", "parts": [{"text": ANSWER}]},
                "finishReason": "STOP", "index": 0,
            }],
            "usageMetadata": {
                "promptTokenCount": measured.prompt, "cachedContentTokenCount": cached,
                "candidatesTokenCount": 1, "totalTokenCount": measured.prompt + 1,
            },
            "modelVersion": model,
        }  # fmt: skip
    else:
        body = {
            "id": "chatcmpl-replay", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{
                "index": 0, "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": measured.prompt, "completion_tokens": 1,
                "total_tokens": measured.prompt + 1,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }  # fmt: skip
    return orjson.dumps(body)
