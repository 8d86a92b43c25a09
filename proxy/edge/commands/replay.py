"""`ctxgate replay PATH…`: saved agent sessions replayed offline (proxy/edge/replay/)."""

from __future__ import annotations

import argparse

from proxy.edge.replay.command import run


def main(args: argparse.Namespace) -> int:
    return run(args)
