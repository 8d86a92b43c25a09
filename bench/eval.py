"""Compression-quality evaluation of ctxgate on long sessions chained from the shared corpus.

    .venv/bin/python bench/eval.py                 # full: 8K (6 sessions, every arm), 16K (3,
                                                   # main, fail, never-recall, ahead-off), 64K
                                                   # (2, main, never-recall), 128K (1, the same)
    .venv/bin/python bench/eval.py --quick         # 3 sessions at 8K, arms main + bg-off (~1-2 min)
    .venv/bin/python bench/eval.py --sessions 3 --window 16384 --arms main,fail --out /tmp/x
    CTXGATE_EVAL_LLAMA_URL=http://127.0.0.1:8080/v1 .venv/bin/python bench/eval.py --quick
    .venv/bin/python bench/eval.py --quick --llama auto    # SmolLM2 via tests/llamacpp_server.py

Each session (tau-bench airline conversations chained; SWE-agent text-action and
function-calling trajectories chained; OpenCode and aider transcripts recorded against the
simulator, bench/record_agents.py; and one-task coding sessions, SWE-agent trajectories chained
under the first one's task statement alone) is replayed turn by turn through a real ctxgate in
front of the provider simulator with the official OpenAI SDK: the history is always the
ORIGINAL one and only ctxgate's forwarded view differs. Compared with the full history and with
JetBrains-style observation masking (last 10 tool outputs kept). After the last turn the client
asks about every
planted fact; the simulator's recall model answers from the view or through ctxgate's recall
tool. Metrics: planted facts answered (and how many via recall), recoverable retention (in
view verbatim, or named by a handle and held in ctxgate's archive, read over the admin API),
overflow errors at the client, structural validity of every forwarded request, billed prompt
tokens (summary calls included), fit, retention of user messages (constraint-stating ones and
the original request too) / artifacts / planted needles in the final forwarded view (also
by session kind: coding agent vs chat or tool service), whether the newest read of a file was
in the request the model answered with an edit of it, prompt-cache prefix reuse, money beside
tokens (prompt tokens priced with cache tiers, OpenAI- and Anthropic-style), compressions
by trigger, added latency with background compression on and off, and shadow agreement per
window (ctxgate's shadow checks on a replay answered by the simulator's in-view model,
deterministic and sampled: B vs A agreement beside the A' vs A noise floor). The never-recall
arm's model answers only from its view (it never calls the recall tool). Before each next
turn the client waits until the session's background compression has landed (admin API
`.../activity`, at most 30 s), as a real agent's seconds-long turns let it, so that the
figures do not depend on the machine's speed (--no-await-compression: turns only --gap-ms
apart). Writes eval.json,
eval.md and eval.png under --out (default bench/results/) and prints the Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench`, `compression`, `tests` importable
    sys.path.insert(0, str(REPO))

from bench.evaluation.corpus import CorpusMissing  # noqa: E402
from bench.evaluation.report import markdown, write  # noqa: E402
from bench.evaluation.runner import ARMS, QUICK_ARMS, EvalConfig, EvalResults, evaluate  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results"
QUICK_WINDOW = 8192
QUICK_SESSIONS = 3
FULL_WINDOWS = (8192, 16384, 65536, 131072)


def config_from(args: argparse.Namespace) -> EvalConfig:
    windows = (
        tuple(args.window) if args.window else ((QUICK_WINDOW,) if args.quick else FULL_WINDOWS)
    )
    arms = tuple(args.arms.split(",")) if args.arms else (QUICK_ARMS if args.quick else tuple(ARMS))
    sessions = args.sessions if args.sessions is not None else (QUICK_SESSIONS if args.quick else 6)
    llama = args.llama or os.environ.get("CTXGATE_EVAL_LLAMA_URL") or None
    return EvalConfig(
        windows=windows,
        sessions=sessions,
        size_factor=args.size,
        arms=arms,
        gap_s=args.gap_ms / 1000,
        seed=args.seed,
        corpus=args.corpus,
        show_progress=not args.no_progress,
        llama_url=llama,
        quick=args.quick,
        shadow=not args.no_shadow,
        one_task=args.one_task if args.one_task is not None else (0 if args.quick else 2),
        await_compression=args.await_compression,
    )


def run(config: EvalConfig, out: Path) -> EvalResults:
    """The in-process entry point (used by tests/bench/test_eval.py): evaluate and write results."""
    results = evaluate(config)
    write(results, out)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 sessions at 8K, arms main + bg-off")
    parser.add_argument(
        "--sessions", type=int, help="sessions per window (default 6; quick 3; fewer from 16K)"
    )
    parser.add_argument("--window", type=int, action="append", help="window in tokens (repeatable)")
    parser.add_argument("--arms", help=f"comma-separated arms from {','.join(ARMS)}")
    parser.add_argument(
        "--size", type=float, default=5.0, help="session length in windows (3 at most from 64K)"
    )
    parser.add_argument(
        "--gap-ms", type=float, default=20.0, help="pause between turns (tool time)"
    )
    parser.add_argument(
        "--await-compression",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before each next turn, wait (at most 30 s; a timeout is counted in the report) "
        "until the session's background compression has landed, as a real agent's "
        "seconds-long turns let it; --no-await-compression: turns only --gap-ms apart, so "
        "where a compression lands depends on the machine's speed (default: await)",
    )
    parser.add_argument("--seed", type=int, default=0, help="needle codes")
    parser.add_argument(
        "--corpus", type=Path, help="shared/corpus folder (default: searched upward)"
    )
    parser.add_argument(
        "--llama", help="real-model probes: a /v1 base URL, or 'auto' to start SmolLM2"
    )
    parser.add_argument(
        "--one-task",
        type=int,
        help="one-task coding sessions per window, beside the chained ones (default 2; quick 0)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--no-shadow", action="store_true", help="skip the shadow-agreement replays"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = config_from(args)
    try:
        results = run(config, args.out)
    except CorpusMissing as exc:
        print(
            f"eval: {exc}; put the shared corpus beside the clone (shared/corpus)", file=sys.stderr
        )
        return 2
    print(markdown(results))
    if config.llama_url is None:
        print(
            "(real-model probes skipped: set CTXGATE_EVAL_LLAMA_URL or pass --llama auto)",
            file=sys.stderr,
        )
    bad = sum(a.client_overflows + a.invalid for s in results.sessions for a in s.arms.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
