"""The `ctxgate` command: `serve` runs the proxy, `compress` previews a compression offline,
`run` runs an agent through an embedded proxy."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("ctxgate")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from proxy.config_file import load_settings, worker_count
    from proxy.edge.app import create_app
    from proxy.edge.logs import configure_logging

    settings = load_settings(args.config)
    configure_logging(settings.logging.level, settings.logging.json)
    host = args.host or settings.server.host
    port = args.port or settings.server.port
    if not settings.auth.keys and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "no auth.keys configured and listening on %s: anyone who reaches this port can use "
            "the upstream credentials configured in ctxgate",
            host,
        )
    if not settings.auth.keys:
        log.info("no auth.keys configured: clients' own Authorization is passed upstream")
    workers = settings.server.workers
    if args.workers is not None:
        workers = worker_count(args.workers, "--workers")
    if workers > 1:
        from proxy.edge.workers import serve_workers

        return serve_workers(settings, host, port, workers, _tune_gc)
    app = create_app(settings)
    log.info(
        "ctxgate listening on http://%s:%d (storage %s)",
        host,
        port,
        settings.storage.url.split("://")[0],
    )
    _tune_gc()
    uvicorn.run(
        app, host=host, port=port, log_config=None, access_log=False, timeout_graceful_shutdown=10
    )
    return 0


def _tune_gc() -> None:
    """Keep the cyclic collector off the request path.

    Parsing one agent request allocates thousands of containers, so CPython's default
    (a young collection every 700 allocations, full ones scanning every module loaded at
    start-up) runs collections inside most requests. Request objects are freed by reference
    counting; only rare cycles need the collector, so it can run far less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _compress(args: argparse.Namespace) -> int:
    import asyncio

    from proxy.config_file import load_settings
    from proxy.edge.offline import compress_file

    settings = load_settings(args.config)
    return asyncio.run(
        compress_file(settings, args.file, model=args.model, force=args.force, focus=args.focus)
    )


def _run(args: argparse.Namespace) -> int:
    import os

    from proxy.edge.run.launcher import RunOptions, run

    options = RunOptions(
        [args.agent, *args.args], attach=args.attach, config=args.config, port=args.port
    )
    # The agent inherits the user's whole environment, and the embedded server's upstreams
    # come from it the way the zero-config settings do.
    return run(options, os.environ)  # noqa: TID251


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", help="YAML config file (default: zero-config from env)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers", help="processes serving the port, or auto (one per usable core); default 1"
    )
    serve.set_defaults(run=_serve)
    compress = sub.add_parser("compress", help="compress a chat request body offline")
    compress.add_argument("file", help="JSON request body (or JSON lines); - for stdin")
    compress.add_argument("--config")
    compress.add_argument("--model", help="override the body's model")
    compress.add_argument("--force", action="store_true", help="compress even under threshold")
    compress.add_argument("--focus", help="topic the summary should preserve in detail")
    compress.set_defaults(run=_compress)
    agent = sub.add_parser(
        "run",
        help="run an agent through ctxgate (claude, codex, aider, opencode, gemini, …)",
        description="Start ctxgate on a free loopback port (zero config: upstreams from the "
        "usual environment variables, sessions under the user's data directory), run AGENT "
        "pointed at it, exit with its exit code and print what ctxgate did.",
    )
    agent.add_argument("--attach", metavar="URL", help="use a running ctxgate instead")
    agent.add_argument("--config", help="YAML config file instead of the zero-config settings")
    agent.add_argument("--port", type=int, help="port of the embedded ctxgate (default: free)")
    agent.add_argument("agent", metavar="AGENT", help="the agent's command")
    agent.add_argument("args", nargs=argparse.REMAINDER, help="the agent's own arguments")
    agent.set_defaults(run=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "run":
        return _main(args)
    # First, before the web stack loads: a signal during start-up ends `run` quietly.
    from proxy.edge.run.process import Stopped, stop_quietly

    stop_quietly()
    try:
        return _main(args)
    except Stopped as stopped:
        return 128 + stopped.signum


def _main(args: argparse.Namespace) -> int:
    from proxy.config_file import SettingsError

    try:
        code: int = args.run(args)
    except SettingsError as exc:
        print(f"ctxgate: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a passthrough or imported engine's options, checked as it loads
        print(f"ctxgate: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
