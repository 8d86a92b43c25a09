"""The engine's summary call, sent through a configured upstream in an API it serves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from compression import SummaryCall, SummaryCallError, SummaryReply
from session.config.settings import SummarySettings
from session.errors import ProxyError, UpstreamTimeout, UpstreamUnavailable
from session.ports.frontdoor import FrontDoor, Usage
from session.ports.upstream import Upstream

# The summary body is JSON we serialise ourselves; servers that dispatch on the media type
# (llama-cpp-python's FastAPI server answers 500 without it) must be told so, whatever
# headers the caller forwarded from its client.
_BODY_HEADERS = {"content-type": "application/json", "accept": "application/json"}


def summary_route(
    summary: SummarySettings,
    upstreams: Mapping[str, Upstream],
    request_upstream: str,
    request_model: str,
) -> tuple[Upstream, str]:
    """The upstream and model that write summaries (`auto`: the request's own)."""
    name = request_upstream if summary.upstream == "auto" else summary.upstream
    return upstreams[name], request_model if summary.model == "auto" else summary.model


class UpstreamSummarizer:
    """A `Summarizer`: one non-streaming call on `upstream` through `door`, errors classified."""

    def __init__(
        self,
        upstream: Upstream,
        door: FrontDoor,
        model: str,
        headers: Mapping[str, str],
        timeout_s: float,
        charge: Callable[[Usage | None], Awaitable[None]] | None = None,
    ) -> None:
        self.upstream = upstream
        self.door = door
        self.model = model
        given = {k.lower(): v for k, v in headers.items() if k.lower() not in _BODY_HEADERS}
        self.headers = {**given, **_BODY_HEADERS}
        self.timeout_s = timeout_s
        self.charge = charge  # records the call's usage in the ledger

    async def __call__(self, call: SummaryCall) -> SummaryReply:
        try:
            response = await self.upstream.call(
                "POST",
                self.door.upstream_path,
                self.door.summary_body(call, self.model),
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
        if self.charge is not None:
            await self.charge(self.door.usage(response.content))
        return self.door.summary_reply(response.content)
