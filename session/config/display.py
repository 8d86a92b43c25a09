"""The effective configuration as a document in the file's own layout (every default filled
in, the environment applied), with its secrets masked: what `ctxgate config show` prints (pure).

Masked: each upstream's `api_key`, `auth.keys` and `auth.admin_key`, an upstream header whose
name says it carries a credential, and the password of any URL (a PostgreSQL storage URL holds
one). A masked key keeps its last four characters when it is long enough to spare them, so two
keys can still be told apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from session.config.settings import COMPRESSION_KEYS, OPTION_HOMES, Settings

MASK = "****"
_SECRET_HEADER_WORDS = ("authorization", "key", "token", "secret", "cookie", "password")


def mask(secret: str) -> str:
    return MASK + secret[-4:] if len(secret) >= 20 else MASK


def mask_url(url: str) -> str:
    """The URL with its password (if any) masked; anything else as written."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


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
            name: mask(value) if _secret_header(name) else value
            for name, value in upstream["headers"].items()
        }
    out["storage"]["url"] = mask_url(out["storage"]["url"])
    auth = out["auth"]
    auth["keys"] = [mask(key) for key in auth["keys"]]
    if auth.get("admin_key"):
        auth["admin_key"] = mask(auth["admin_key"])
    out["compression"] = _compression(out["compression"])
    return out


def _secret_header(name: str) -> bool:
    return any(word in name.lower() for word in _SECRET_HEADER_WORDS)


def _compression(section: dict[str, Any]) -> dict[str, Any]:
    """The checked compressor options back where the file sets them: three keys on
    `compression` itself, the rest in `options` (for the built-in engine), but those set in
    `compression.summary`, which shows them."""
    compressor: dict[str, Any] = section.pop("compressor")
    for key in COMPRESSION_KEYS:
        section[key] = compressor.pop(key)
    if section["engine"] == "compressor":
        section["options"] = {k: v for k, v in compressor.items() if k not in OPTION_HOMES}
    return section
