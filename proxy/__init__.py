"""ctxgate's proxy: the only package that imports the web framework and the HTTP client.

A request walks its subpackages in one direction, and each imports only those after it:

- `proxy.edge`: the ASGI app, its routes, the admin API, the dashboard, the `ctxgate` command;
- `proxy.gateway`: one request served end to end: auth, the relay, recall rounds;
- `proxy.doors`: the front doors: each wire API parsed, rendered and its stream relayed;
- `proxy.provider`: the provider side: upstreams over the connection pool, images.

Below them all is the session core (`session/`), which holds the conversation logic and the
contracts the doors and the provider implement. `proxy.config_file` reads the configuration
and `proxy.http_errors` maps errors to HTTP; both are shared by every stage and import none of them.
`tests/test_architecture.py` holds the subpackages to the `May import` line of their
docstrings, and fails on any import circle. The names below are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.config_file import load_settings
    from proxy.edge.app import create_app
    from session.config.settings import Settings

__all__ = ["Settings", "create_app", "load_settings"]

# Imported when first asked for: every `proxy.*` import runs this file, and neither the
# `ctxgate` command's parser (its `--help`) nor `ctxgate run`, which must own its signals
# first, may pay for the web framework and the database before they need them.
_HOMES = {
    "Settings": "session.config.settings",
    "create_app": "proxy.edge.app",
    "load_settings": "proxy.config_file",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'proxy' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
