"""Calls to upstream providers over one shared connection pool (proxy/provider/transport.py).

Requests go straight to httpx's transport: a proxy has no use for the client layer above it
(cookies, redirects, auth flows, default headers), which costs a good part of a millisecond
per request. httpx exceptions are translated into proxy errors here and nowhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx

from session.config.settings import UpstreamSettings
from session.errors import ProxyError, UpstreamStatus, UpstreamTimeout, UpstreamUnavailable
from session.ports.headers import client_response_headers, wire_headers


def map_transport_error(exc: httpx.HTTPError, upstream: UpstreamSettings) -> ProxyError:
    """The proxy error for an httpx failure (never includes credentials)."""
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"The upstream '{upstream.name}' did not answer in time.")
    return UpstreamUnavailable(
        f"The upstream '{upstream.name}' could not be reached: {type(exc).__name__}."
    )


class Upstream:
    """One configured provider."""

    def __init__(self, settings: UpstreamSettings, transport: httpx.AsyncBaseTransport) -> None:
        self.settings = settings
        self._transport = transport
        self._timeout = httpx.Timeout(
            settings.timeout_s, connect=settings.connect_timeout_s
        ).as_dict()
        self._urls: dict[str, httpx.URL] = {}  # parsing the URL is a good part of a request

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> httpx.Request:
        timeout = self._timeout
        if timeout_s is not None:
            timeout = httpx.Timeout(timeout_s, connect=self.settings.connect_timeout_s).as_dict()
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.settings.base_url + path)
        return httpx.Request(
            method,
            url,
            content=body,
            headers=wire_headers(headers),
            extensions={"timeout": timeout},
        )

    async def call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        """Send and read the whole answer; non-2xx answers come back as responses, not errors."""
        request = self._request(method, path, body, headers, timeout_s)
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.settings) from exc
        try:
            await response.aread()
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.settings) from exc
        finally:
            await response.aclose()
        return response

    @asynccontextmanager
    async def open_stream(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[httpx.Response]:
        """Send and return once the status line and headers arrived; the body stays unread.

        A non-2xx status is read fully and raised as `UpstreamStatus`.
        """
        request = self._request("POST", path, body, headers)
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.settings) from exc
        try:
            if response.status_code >= 400:
                try:
                    raw = await response.aread()
                except httpx.HTTPError as exc:
                    raise map_transport_error(exc, self.settings) from exc
                raise UpstreamStatus(
                    response.status_code, raw, client_response_headers(response.headers.items())
                )
            yield response
        finally:
            await response.aclose()

    @asynccontextmanager
    async def relay(
        self,
        method: str,
        target: str,
        body: bytes | AsyncIterable[bytes],
        headers: Mapping[str, str],
    ) -> AsyncIterator[httpx.Response]:
        """Send any request (`target` is a path under the base URL, with its query) and
        return once the answer's headers arrived, whatever its status; the body stays unread
        (read it with `aiter_bytes`) until the block ends."""
        request = httpx.Request(
            method,
            httpx.URL(self.settings.base_url + target),  # not cached: any path may come
            content=body,
            headers=wire_headers(headers),
            extensions={"timeout": self._timeout},
        )
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.HTTPError as exc:
            raise map_transport_error(exc, self.settings) from exc
        try:
            yield response
        finally:
            await response.aclose()
