"""The upstream as the session core calls it: one request, the whole answer back.

`proxy.provider.upstream.Upstream` is the implementation (httpx over a shared pool); the core
sees only this protocol, so it imports no HTTP library. Transport failures arrive as
`session.errors` (`UpstreamTimeout`, `UpstreamUnavailable`); an error status is an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from session.config.settings import UpstreamSettings


class Answer(Protocol):
    """A complete upstream answer (httpx's `Response` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def content(self) -> bytes: ...

    @property
    def text(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


class Upstream(Protocol):
    """One configured provider."""

    settings: UpstreamSettings

    async def call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        *,
        timeout_s: float | None = None,
    ) -> Answer:
        """Send and read the whole answer; non-2xx answers come back as answers, not errors."""
        ...
