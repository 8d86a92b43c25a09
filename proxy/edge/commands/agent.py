"""`ctxgate run AGENT`: the agent run through ctxgate (proxy/edge/run/)."""

from __future__ import annotations

import argparse
import os

from proxy.edge.run.launcher import RunOptions, run


def main(args: argparse.Namespace) -> int:
    options = RunOptions(
        [args.agent, *args.args], attach=args.attach, config=args.config, port=args.port
    )
    # The agent inherits the user's whole environment, and the embedded server's upstreams
    # come from it the way the zero-config settings do.
    return run(options, os.environ)  # noqa: TID251
