"""The engine's summary call, sent through a configured upstream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from compression.engine import SummaryCall, SummaryCallError, SummaryReply
from proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnavailable
from proxy.upstream import Upstream

# The summary body is JSON we serialise ourselves; servers that dispatch on the media type
# (llama-cpp-python's FastAPI server answers 500 without it) must be told so, whatever
# headers the caller forwarded from its client.
_BODY_HEADERS = {"content-type": "application/json", "accept": "application/json"}


class UpstreamSummarizer:
    """A `Summarizer`: one non-streaming chat completion on `upstream`, errors classified."""

    def __init__(
        self, upstream: Upstream, model: str, headers: Mapping[str, str], timeout_s: float
    ) -> None:
        self.upstream = upstream
        self.model = model
        given = {k.lower(): v for k, v in headers.items() if k.lower() not in _BODY_HEADERS}
        self.headers = {**given, **_BODY_HEADERS}
        self.timeout_s = timeout_s

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        body: dict[str, Any] = {
            "model": call.model or self.model,
            "messages": call.messages,
            "max_tokens": call.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        try:
            response = await self.upstream.call(
                "POST",
                "/chat/completions",
                orjson.dumps(body),
                self.headers,
                timeout_s=self.timeout_s,
            )
        except UpstreamTimeout as exc:
            raise SummaryCallError(exc.message, timeout=True) from exc
        except UpstreamUnavailable as exc:
            raise SummaryCallError(exc.message, network=True) from exc
        except ProxyError as exc:
            raise SummaryCallError(exc.message) from exc
        if response.status_code >= 400:
            raise SummaryCallError(
                f"summary model answered {response.status_code}: {response.text[:300]}",
                status=response.status_code,
            )
        return _reply(response.content)


def _reply(raw: bytes) -> SummaryReply:
    try:
        data = orjson.loads(raw)
        choice = data["choices"][0]
        message = choice.get("message") or {}
        usage = data.get("usage") or {}
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise SummaryCallError("summary model sent an unreadable answer") from exc
    content = message.get("content")
    return SummaryReply(
        text=content if isinstance(content, str) else "",
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )
