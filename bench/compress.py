"""Time one compression pass, without the summary call, on a 200K-token agent history.

    python bench/compress.py [--runs N] [--context-length N]

The history chains the corpus conversations (one system prompt, then their turns) up to
1,000 messages / ~200K tokens. The summarizer answers instantly, so the figures are the
engine's own cost: cold (empty per-message token cache) and warm (every input message
already counted and scanned, as on the next turn of a session).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compression import CompressionContext, Compressor, Message, SummaryCall, SummaryReply
from compression.verbatim import anchors, fileops, instructions, observations

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"
TARGET_MESSAGES = 1_000
TARGET_TOKENS = 200_000
SUMMARY = "## Goal\nContinue the work.\n## Completed Actions\n1. Many tool calls — ok\n"


def counter() -> Any:
    try:
        from compression import counter_for_model
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.compression.counters import CharCounter

        return CharCounter()
    return counter_for_model("gpt-4o")


def conversations(corpus: Path) -> list[list[Message]]:
    found: list[list[Message]] = []
    for path in sorted(corpus.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            found.append(json.loads(line)["messages"])
    # Alternate sources so the history mixes short customer-service turns and coding tools.
    found.sort(key=lambda messages: -sum(len(str(m.get("content") or "")) for m in messages))
    return found


def build_history(corpus: Path, count: Any) -> list[Message]:
    """One system prompt, then whole conversations' turns, until the targets are reached."""
    pool = conversations(corpus)
    history: list[Message] = [pool[0][0]]
    tokens = count.count_messages(history)
    per_message_goal = TARGET_TOKENS / TARGET_MESSAGES
    index = 0
    while len(history) < TARGET_MESSAGES:
        turns = pool[index % len(pool)][1:]
        index += 1
        room = TARGET_MESSAGES - len(history)
        size = sum(count.count_message(m) for m in turns)
        if (
            len(history) > 1
            and (tokens + size) / (len(history) + len(turns)) < per_message_goal
            and len(turns) < room
            and index < 4 * len(pool)
        ):
            continue  # keep the history dense enough to reach ~200K tokens in 1,000 messages
        for message in turns[:room]:
            history.append(message)
            tokens += count.count_message(message)
    while history[-1]["role"] not in ("user", "tool"):
        history.pop()
    return history


async def instant(call: SummaryCall) -> SummaryReply:
    return SummaryReply(SUMMARY, "stop")


async def one_pass(
    engine: Compressor, history: list[Message], count: Any, context_length: int
) -> tuple[float, Any]:
    ctx = CompressionContext(
        model="gpt-4o",
        context_length=context_length,
        max_output_tokens=16_000,
        counter=count,
        summarize=instant,
        now=1.0,
    )
    start = time.perf_counter()
    result = await engine.compress(history, ctx)
    return (time.perf_counter() - start) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--context-length", type=int, default=256_000)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    count = counter()
    history = build_history(args.corpus, count)
    engine = Compressor()
    cold: list[float] = []
    result: Any = None
    for _ in range(max(3, args.runs // 4)):
        if hasattr(count, "clear_cache"):
            count.clear_cache()
        for module in (anchors, fileops, observations):
            module.clear_caches()  # memoized scans of the turns: cold means none of them either
        instructions.clear_cache()
        elapsed, result = asyncio.run(one_pass(engine, history, count, args.context_length))
        cold.append(elapsed)
    warm = [
        asyncio.run(one_pass(engine, history, count, args.context_length))[0]
        for _ in range(args.runs)
    ]
    before = count.count_messages(history)
    print(
        f"history: {len(history):,} messages, {before:,} tokens "
        f"({type(count).__name__}); window {args.context_length:,}"
    )
    print(
        f"result:  {result.outcome}, {len(result.messages)} messages, "
        f"{result.tokens_after:,} tokens, {result.summarized} summarized"
    )
    print()
    print(f"{'pass':<26}{'median ms':>12}{'min ms':>10}{'max ms':>10}")
    for label, runs in (("cold (empty token cache)", cold), ("warm (cached messages)", warm)):
        print(f"{label:<26}{statistics.median(runs):>12.1f}{min(runs):>10.1f}{max(runs):>10.1f}")


if __name__ == "__main__":
    main()
