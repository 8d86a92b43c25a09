"""The effective configuration as a document in the file's own layout (every default filled
in, the environment applied), with its secrets masked: what `ctxgate config show` prints (pure).

Masked: each upstream's `api_key`, `auth.keys` and `auth.admin_key`, and whatever sits under a
name that says it carries a credential: an upstream header (`Authorization`, `Helicone-Auth`,
`x-api-key`), a URL's query parameter (`?key=`, `?sig=`: providers and storage drivers take
credentials there too), an engine option (an engine's own options are printed as written). A
URL's password is masked too (a PostgreSQL storage URL holds one). A masked key keeps its last
four characters when it is long enough to spare them, so two keys can still be told apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from session.config.settings import COMPRESSION_KEYS, OPTION_HOMES, Settings

MASK = "****"
# A name says it carries a credential when one of its words (split at `-`, `_`, `.` and
# camelCase) is, or ends in, one of these (`apikey`, `access_token`, `Helicone-Auth`), or is one
# of the short ones, taken whole so that `max_tokens`, `passage` or `signal` stay readable.
_SECRET_ENDINGS = (
    "auth",
    "key",
    "token",
    "secret",
    "password",
    "signature",
    "credential",
    "cookie",
)
_SECRET_WORDS = {"authorization", "credentials", "pass", "passwd", "pwd", "sig", "secrets"}


def mask(secret: str) -> str:
    return MASK + secret[-4:] if len(secret) >= 20 else MASK


def secret_name(name: str) -> bool:
    """Whether a header, query parameter or option named `name` carries a credential."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).lower()
    return any(
        word in _SECRET_WORDS or word.endswith(_SECRET_ENDINGS)
        for word in re.split(r"[^a-z0-9]+", spaced)
    )


def mask_url(url: str) -> str:
    """The URL with its password and its secret-named query values masked; anything else as
    written (rebuilt from its parts only where a password is replaced: that would turn
    `sqlite:///x` into `sqlite:/x`)."""
    head, question, rest = url.partition("?")
    query, hash_, fragment = rest.partition("#")
    masked = f"{head}{question}{_masked_query(query)}{hash_}{fragment}"
    try:
        parts = urlsplit(masked)
        password = parts.password
    except ValueError:
        return masked
    if not password:
        return masked
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def _masked_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, equals, value = pair.partition("=")
        secret = equals and value and secret_name(unquote_plus(name))
        pairs.append(f"{name}={MASK}" if secret else pair)
    return "&".join(pairs)


def _masked_options(value: Any) -> Any:
    """Options with the values under secret names masked, at any depth."""
    if isinstance(value, Mapping):
        return {
            k: MASK if secret_name(str(k)) and v not in (None, "") else _masked_options(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked_options(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """A settings value as YAML writes it: dataclasses as mappings, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def effective_document(settings: Settings) -> dict[str, Any]:
    """`settings` in the config file's layout, secrets masked."""
    out: dict[str, Any] = _plain(settings)
    for upstream in out["upstreams"].values():
        upstream.pop("name", None)
        if upstream.get("api_key"):
            upstream["api_key"] = mask(upstream["api_key"])
        upstream["base_url"] = mask_url(upstream["base_url"])
        upstream["headers"] = {
            name: mask(value) if secret_name(name) else value
            for name, value in upstream["headers"].items()
        }
    out["storage"]["url"] = mask_url(out["storage"]["url"])
    auth = out["auth"]
    auth["keys"] = [mask(key) for key in auth["keys"]]
    if auth.get("admin_key"):
        auth["admin_key"] = mask(auth["admin_key"])
    out["compression"] = _compression(out["compression"])
    return out


def _compression(section: dict[str, Any]) -> dict[str, Any]:
    """The checked compressor options back where the file sets them: three keys on
    `compression` itself, the rest in `options` (for the built-in engine), but those set in
    `compression.summary`, which shows them. The built-in options are all known and none is a
    credential (`cooldowns.auth` holds waiting times), so only another engine's are masked."""
    compressor: dict[str, Any] = section.pop("compressor")
    for key in COMPRESSION_KEYS:
        section[key] = compressor.pop(key)
    if section["engine"] == "compressor":
        section["options"] = {k: v for k, v in compressor.items() if k not in OPTION_HOMES}
    else:  # another engine's options are as written: whatever it takes, credentials too
        section["options"] = _masked_options(section["options"])
    return section
