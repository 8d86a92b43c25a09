"""Who may use the proxy and its admin API.

With `auth.keys` configured, clients present one of those keys (Bearer, x-api-key or
Google's x-goog-api-key, which the Gemini door also takes from a `key=` query); the key
never travels upstream (the upstream's own key is used). Without keys, the client's credential
is passed through to upstreams that have no key of their own. Comparisons are constant-time
over SHA-256 digests, so only digests are held in memory after start-up.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from session.config.settings import AuthSettings
from session.errors import Unauthorized
from session.ports.headers import bearer_token


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def _matches(candidate: str | None, digests: tuple[bytes, ...]) -> bool:
    if not candidate:
        return False
    wanted = _digest(candidate)
    found = False
    for digest in digests:  # no early exit: every key is compared
        found |= hmac.compare_digest(wanted, digest)
    return found


class Authenticator:
    def __init__(self, settings: AuthSettings) -> None:
        self._keys = tuple(_digest(k) for k in settings.keys)
        self._admin = (_digest(settings.admin_key),) if settings.admin_key else ()

    def client_credential(self, headers: Mapping[str, str]) -> str | None:
        """The caller's credential (it scopes their sessions); raises when keys are enforced."""
        token = bearer_token(headers)
        if self._keys and not _matches(token, self._keys):
            raise Unauthorized(
                "Missing or invalid API key for ctxgate."
                if token is None
                else "Invalid API key for ctxgate."
            )
        return token

    def forwardable(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The client's headers minus a ctxgate key, which must never reach an upstream."""
        out = {k.lower(): v for k, v in headers.items()}
        if self._keys:
            for name in ("authorization", "x-api-key", "api-key", "x-goog-api-key"):
                out.pop(name, None)
        return out

    def check_admin(self, headers: Mapping[str, str]) -> None:
        if not self._admin:
            raise Unauthorized("The admin API is disabled: set auth.admin_key to enable it.")
        if not _matches(bearer_token(headers), self._admin):
            raise Unauthorized("Invalid admin key.")
