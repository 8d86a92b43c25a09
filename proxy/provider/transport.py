"""The connection pool under every upstream call: aiohttp's, behind httpx's transport seam.

httpx stays the client API (its requests, responses and errors are what the rest of ctxgate
sees); the bytes move through aiohttp, whose C parser (llhttp) and writer cost less CPU per
request than httpcore + h11 (bench/overhead.py measures both floors in one run). aiohttp is
asked for nothing of its own: no cookies, redirects, decompression, environment proxies or
default headers, nor to resend a request by itself, so what the upstream receives is what
the httpx request holds. What it cannot send byte for byte (a header value that is not
UTF-8, a bodiless DELETE) goes through httpx's own transport; `server.upstream_client:
httpx` uses that for everything.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx
import yarl

# Headers aiohttp would add when the request lacks them; a relay adds none.
_NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# The methods aiohttp sends without a body as they are; for any other (DELETE, say) it adds
# `Content-Length: 0`, which httpx does not, so such a request goes through httpx.
_BODILESS_METHODS = aiohttp.ClientRequest.GET_METHODS


def new_http_transport(client: str = "aiohttp") -> httpx.AsyncBaseTransport:
    """The connection pool every upstream call goes through (never follows redirects)."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=60)
    fallback = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    if client == "httpx":
        return fallback
    return AiohttpTransport(limits, fallback)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends through one shared aiohttp session."""

    def __init__(self, limits: httpx.Limits, fallback: httpx.AsyncBaseTransport) -> None:
        self._limits = limits
        self._fallback = fallback
        self._ssl: ssl.SSLContext = httpx.create_ssl_context(trust_env=False)
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        # Created on first use: an aiohttp session belongs to the event loop it starts in.
        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry or 0,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NO_AUTO_HEADERS,
            auto_decompress=False,
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        # aiohttp sends an idempotent request (GET, PUT, DELETE...) a second time, on a new
        # connection, when the server drops the first without answering; httpx raises instead
        # and a relay must not repeat a request on its own. aiohttp's own test client turns
        # this off the same way (there is no constructor argument for it).
        self._session._retry_connection = False
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = _text_headers(request.headers.raw)
        data = None if headers is None else _body(request, headers)
        if headers is None or (data is None and request.method not in _BODILESS_METHODS):
            return await self._fallback.handle_async_request(request)
        session = self._session or self._open_session()
        try:
            with _httpx_errors(connecting=True):
                response = await session.request(
                    request.method,
                    # httpx has encoded the URL already; yarl would re-quote it otherwise
                    yarl.URL(str(request.url), encoded=True),
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    timeout=_timeout(request.extensions.get("timeout", {})),
                    server_hostname=request.extensions.get("sni_hostname"),
                )
        except httpx.HTTPError:
            if isinstance(data, _Upload) and data.error is not None:
                raise data.error from None  # the body's own failure, not aiohttp's wrapping
            raise
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("latin-1", "replace"),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self._fallback.aclose()


class _Body(httpx.AsyncByteStream):
    """An answer's body, handed over as it arrives; the connection is reused only after the
    whole body was read (an abandoned stream closes its connection)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors(connecting=False):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def _text_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]] | None:
    """The headers as aiohttp takes them (it writes values as UTF-8), or None when a value
    is not UTF-8 and so could not go out as the same bytes."""
    try:
        return [(name.decode("ascii"), value.decode("utf-8")) for name, value in raw]
    except UnicodeDecodeError:
        return None


def _body(request: httpx.Request, headers: list[tuple[str, str]]) -> bytes | _Upload | None:
    """The body as aiohttp takes it; None for no body and no framing header, which aiohttp
    then sends without one (given b"" it would add `Content-Length: 0`)."""
    try:
        content = request.content
    except httpx.RequestNotRead:
        # A streamed body: aiohttp frames it itself and refuses a request that already
        # names the framing.
        headers[:] = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        return _Upload(request.stream)
    if not content and "content-length" not in request.headers:
        return None
    return content


class _Upload:
    """A streamed request body that keeps what broke it (a client's stalled upload, say):
    aiohttp reports any such failure as a lost connection to the upstream."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.error: Exception | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except Exception as exc:
            self.error = exc
            raise


def _timeout(timeout: dict[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts in aiohttp's terms: `pool` bounds the wait for a
    connection (aiohttp counts connecting in it), `connect` the TCP/TLS set-up, `read` each
    wait for bytes. aiohttp has no write timeout; `read` bounds the wait for the answer."""
    return _client_timeout(timeout.get("pool"), timeout.get("connect"), timeout.get("read"))


@functools.lru_cache(maxsize=64)  # an upstream's few settings: built once, not per call
def _client_timeout(
    pool: float | None, connect: float | None, read: float | None
) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


@contextmanager
def _httpx_errors(*, connecting: bool) -> Iterator[None]:
    """aiohttp's failures as the httpx errors httpx's own transport raises for them."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__) from exc
    except aiohttp.ClientResponseError as exc:  # an answer that is not valid HTTP
        raise httpx.RemoteProtocolError(exc.message or type(exc).__name__) from exc
    except (aiohttp.ClientOSError, aiohttp.ClientConnectionError) as exc:
        error = httpx.ConnectError if connecting else httpx.ReadError
        raise error(str(exc) or type(exc).__name__) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(str(exc)) from exc
    except aiohttp.ClientError as exc:
        raise httpx.NetworkError(str(exc) or type(exc).__name__) from exc
    except ValueError as exc:  # what aiohttp refuses to write, e.g. a newline in a header
        raise httpx.LocalProtocolError(str(exc)) from exc
