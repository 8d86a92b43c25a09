"""`ctxgate replay PATH…`: the subcommand's options, run and output.

The options are declared with nothing else imported: every `ctxgate` command builds the
parser, and only `replay` needs the services it runs on.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="session files or folders of any known format"
    )
    parser.add_argument("--config", help="YAML config (compression options, prices, summary)")
    parser.add_argument("--window", type=int, help="context window in tokens (default: model's)")
    parser.add_argument("--model", help="replay every session as this model")
    parser.add_argument(
        "--summary-model", help="write summaries with this configured model (default: the "
        "config's; without one, ctxgate's deterministic fallback summary)"
    )  # fmt: skip
    parser.add_argument("--db", help="keep the replayed sessions in this SQLite file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--html", metavar="FILE", help="write an HTML report with the chart")
    parser.add_argument(
        "--progress", action="store_true", help="show the progress bar even when stderr is no TTY"
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    from pathlib import Path

    import orjson

    from proxy.config_file import load_settings
    from proxy.edge.replay.html_report import html_report
    from proxy.edge.replay.progress import ProgressBar
    from proxy.edge.replay.readers.formats import read_paths
    from proxy.edge.replay.readers.recording import RecordingError
    from proxy.edge.replay.report import as_json, text_report
    from proxy.edge.replay.runner import ReplayOptions, replay_all

    try:
        recordings = read_paths(args.paths)
    except RecordingError as exc:
        print(f"ctxgate: {exc}", file=sys.stderr)
        return 2
    if not recordings:
        print("ctxgate: no request to replay in the given sessions", file=sys.stderr)
        return 1
    if args.model:
        recordings = [r.with_model(args.model) for r in recordings]
    if args.window is not None and args.window <= 0:
        print("ctxgate: --window must be a positive number of tokens", file=sys.stderr)
        return 2
    options = ReplayOptions(
        window=args.window,
        summary_model=args.summary_model,
        db_url=f"sqlite+aiosqlite:///{Path(args.db).resolve()}" if args.db else None,
        configured=args.config is not None,
    )
    quiet = logging.getLogger("ctxgate")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the report says what happened
    bar = ProgressBar(sys.stderr, len(recordings)) if args.progress or sys.stderr.isatty() else None
    try:
        sessions = asyncio.run(replay_all(load_settings(args.config), recordings, options, bar))
    finally:
        quiet.setLevel(level)
        if bar is not None:
            bar.close()
    if args.html:
        Path(args.html).write_text(html_report(sessions), encoding="utf-8")
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(as_json(sessions), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(text_report(sessions))
    return 0
