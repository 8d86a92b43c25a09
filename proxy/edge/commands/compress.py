"""`ctxgate compress FILE`: a request body compressed offline, printed (proxy/edge/offline.py)."""

from __future__ import annotations

import argparse
import asyncio

from proxy.config_file import load_settings
from proxy.edge.offline import compress_file


def main(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    return asyncio.run(
        compress_file(settings, args.file, model=args.model, force=args.force, focus=args.focus)
    )
