"""The `ctxgate` command: `serve` runs the proxy, `compress` previews a compression offline,
`replay` replays saved agent sessions offline, `run` runs an agent through an embedded proxy,
`config check` / `config show` read a config file.

This module only builds the parser: each subcommand is registered here with its arguments and
the name of its handler, a module of proxy/edge/commands/ imported when that subcommand runs,
so `ctxgate --help` (and a mistyped argument) costs no web framework, database or tokenizer.
A subcommand is one `_add` call and one handler module.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from proxy.edge.run.agents import agents_help
from session.config.reader import SettingsError

Handler = Callable[[argparse.Namespace], int]


def _handler(module: str, function: str = "main") -> Handler:
    """`proxy.edge.commands.<module>.<function>`, imported when called."""

    def call(args: argparse.Namespace) -> int:
        target = getattr(importlib.import_module(f"proxy.edge.commands.{module}"), function)
        code: int = target(args)
        return code

    return call


def _add(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    help_text: str,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, **kwargs)
    parser.set_defaults(run=handler)
    return parser


def _serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = _add(sub, "serve", _handler("serve"), "run the proxy")
    serve.add_argument(
        "--config",
        help="YAML config file (default: zero config, every API to its provider, from "
        "OPENAI_*, ANTHROPIC_* and GEMINI_* variables)",
    )
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers", help="processes serving the port, or auto (one per usable core); default 1"
    )


def _compress(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compress = _add(sub, "compress", _handler("compress"), "compress a chat request body offline")
    compress.add_argument("file", help="JSON request body (or JSON lines); - for stdin")
    compress.add_argument("--config")
    compress.add_argument("--model", help="override the body's model")
    compress.add_argument("--force", action="store_true", help="compress even under threshold")
    compress.add_argument("--focus", help="topic the summary should preserve in detail")


def _run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = _add(
        sub,
        "run",
        _handler("agent"),
        "run an agent through ctxgate (claude, codex, aider, opencode, gemini, …)",
        description="Start ctxgate on a free loopback port (zero config: upstreams from the\n"
        "usual environment variables, sessions under the user's data directory), run AGENT\n"
        "pointed at it, exit with its exit code and print what ctxgate did.",
        epilog=agents_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    agent.add_argument("--attach", metavar="URL", help="use a running ctxgate instead")
    agent.add_argument("--config", help="YAML config file instead of the zero-config settings")
    agent.add_argument("--port", type=int, help="port of the embedded ctxgate (default: free)")
    agent.add_argument("agent", metavar="AGENT", help="the agent's command")
    agent.add_argument("args", nargs=argparse.REMAINDER, help="the agent's own arguments")


def _replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from proxy.edge.replay.command import add_arguments  # the options only: nothing heavy

    replay = _add(
        sub,
        "replay",
        _handler("replay"),
        "replay saved agent sessions through ctxgate offline and report what it saves",
        description="Read saved sessions (Claude Code, Codex, Gemini CLI, OpenCode, or Chat "
        "Completions / Responses bodies), send each request through ctxgate's session path "
        "with no provider, and report tokens and money with and without ctxgate.",
    )
    add_arguments(replay)


def _config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="check a config file, or show the one in effect")
    actions = config.add_subparsers(dest="action", required=True)
    file_help = "YAML config file (default: the zero-config settings from the environment)"
    check = _add(
        actions,
        "check",
        _handler("configuration", "check"),
        "list every problem of a config file (exit 0 valid, 2 not)",
    )
    check.add_argument("file", nargs="?", metavar="FILE", help=file_help)
    show = _add(
        actions,
        "show",
        _handler("configuration", "show"),
        "print the effective configuration (defaults filled in, secrets masked)",
    )
    show.add_argument("file", nargs="?", metavar="FILE", help=file_help)


SUBCOMMANDS = (_serve, _compress, _replay, _run, _config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxgate", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for register in SUBCOMMANDS:
        register(sub)
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
    try:
        code: int = args.run(args)
    except SettingsError as exc:
        print("ctxgate: invalid configuration:", file=sys.stderr)
        print("".join(f"  {problem}\n" for problem in exc.problems), end="", file=sys.stderr)
        return 2
    except ValueError as exc:  # a passthrough or imported engine's options, checked as it loads
        print(f"ctxgate: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
