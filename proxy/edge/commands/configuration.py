"""`ctxgate config check [FILE]` and `ctxgate config show [FILE]`.

`check` reads the file (without one: the zero-config settings from the environment) exactly as
`serve` does, through `proxy.config_file`, and lists every problem at once: exit 0 when it is
valid, 2 when not. A `${VAR}` that is unset is named beside the problem it causes, and noted
even when it causes none (it reads as empty). `show` prints the effective configuration as
YAML, every default filled in and the environment applied, with its secrets masked.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import yaml

from compression import load_engine
from proxy.config_file import SettingsError, check_document, load_document, parse_settings
from session.config.display import effective_document
from session.config.settings import Settings


def check(args: argparse.Namespace) -> int:
    return check_file(args.file, os.environ, sys.stdout)  # noqa: TID251


def show(args: argparse.Namespace) -> int:
    return show_file(args.file, os.environ, sys.stdout)  # noqa: TID251


def _name(path: str | None) -> str:
    return path or "zero-config settings (no file: from the environment)"


def check_file(path: str | None, environ: Mapping[str, str], out: TextIO) -> int:
    try:
        document = load_document(path, environ)
    except SettingsError as exc:
        print(f"{_name(path)}: 1 problem\n  {exc}", file=out)
        return 2
    problems = check_document(document, environ)
    messages = list(problems.messages)
    if not messages:
        messages += _engine_problems(parse_settings(document, environ))
    notes = [
        f"{key}: ${{{name}}} is not set (read as empty)"
        for key, names in problems.unset.items()
        for name in names
        if not any(f"${{{name}}}" in message for message in messages)
    ]
    if messages:
        count = f"{len(messages)} problem{'s' if len(messages) > 1 else ''}"
        print(f"{_name(path)}: {count}", file=out)
        print("".join(f"  {message}\n" for message in messages), end="", file=out)
    else:
        print(f"{_name(path)}: valid", file=out)
    print("".join(f"  note: {note}\n" for note in notes), end="", file=out)
    return 2 if messages else 0


def _engine_problems(settings: Settings) -> list[str]:
    """The engine's own check, the one `serve` runs as it builds it (proxy/edge/services.py)."""
    c = settings.compression
    try:
        load_engine(c.engine, c.compressor if c.engine == "compressor" else c.options)
    except ValueError as exc:
        return [f"compression.engine: {exc}"]
    return []


def show_file(path: str | None, environ: Mapping[str, str], out: TextIO) -> int:
    settings = parse_settings(load_document(path, environ), environ)
    document: dict[str, Any] = effective_document(settings)
    print(f"# {_name(path)}: the effective configuration, secrets masked", file=out)
    out.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return 0
