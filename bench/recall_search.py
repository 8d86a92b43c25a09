"""Recall's reads of the archive at 1,000 and at 100,000 archived messages.

    .venv/bin/python bench/recall_search.py [--sizes 1000 100000] [--repeats 200]

Fills one session's archive through `SessionStore.commit_compression` (as compressions do,
index included) on a real SQLite file in a temporary directory and, when CTXGATE_TEST_PG_URL
is set, on that PostgreSQL database (its public schema is dropped and made again: point it at a
test database). Then times, through the store, a search for an id written with a colon after it,
for a file name with a full stop after it, for three words, and a handle fetch of four
positions, and prints the median of each per size and the ratio of the largest size to the
smallest. Target: under 2x, a search's cost following its matches and not the archive's size.
Three of the vocabulary's words match about 3.6% of the archive (some 3,600 messages at
100,000): past `storage.rows.search.CANDIDATES` matches, only the newest that many are ranked.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import CompressionCommit, EventRecord, Message, SessionKey, SessionStore
from storage.database.db import Database
from storage.rows import search

PG_ENV = "CTXGATE_TEST_PG_URL"
SK = SessionKey("bench", "recall-search")
PER_COMMIT = 1000  # archived messages per compression
VOCABULARY = [
    f"{a}{b}" for a in ("lo", "ra", "ki", "mu", "te", "so", "pa", "ne") for b in range(600)
]


def message(n: int, rng: random.Random) -> Message:
    """A tool result of ~60 words, an id and a path of its own among them."""
    words = rng.choices(VOCABULARY, k=60)
    words[20] = f"RES-{n:06d},"
    words[40] = f"src/pkg{n % 50}/module_{n}.py:"
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": " ".join(words)}


def compression(n: int, archived: list[tuple[int, Message]]) -> CompressionCommit:
    event = EventRecord(SK, "agent", "ok", 1000, 100, len(archived), 2, 1.0)
    return CompressionCommit(
        sk=SK,
        model="bench",
        prefix_len=n,
        prefix_digest=f"{n:064x}",
        messages=[{"role": "user", "content": f"summary up to {n}"}],
        summary=None,
        tokens_before=1000,
        tokens_after=100,
        archived=archived,
        event=event,
        engine_state={},
    )


async def fill(store: SessionStore, size: int, rng: random.Random) -> float:
    """Archive `size` messages; the seconds it took."""
    started = time.perf_counter()
    for low in range(0, size, PER_COMMIT):
        high = min(size, low + PER_COMMIT)
        archived = [(n, message(n, rng)) for n in range(low, high)]
        await store.commit_compression(compression(high, archived))
    return time.perf_counter() - started


async def median_ms(call: Callable[[int], Awaitable[object]], repeats: int) -> float:
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        await call(i)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(url: str, size: int, repeats: int) -> dict[str, float]:
    rng = random.Random(size)
    store = await SessionStore.open(url)
    try:
        filled = await fill(store, size, rng)
        picks = [rng.randrange(size) for _ in range(repeats)]

        async def by_id(i: int) -> None:
            found = await store.search_archive(SK, f"RES-{picks[i]:06d}:")
            assert found and found[0].position == picks[i], found[:1]

        async def by_path(i: int) -> None:
            found = await store.search_archive(SK, f"module_{picks[i]}.py.")
            assert found and found[0].position == picks[i], found[:1]

        async def by_words(i: int) -> None:
            await store.search_archive(SK, " ".join(rng.choices(VOCABULARY, k=3)))

        async def fetch(i: int) -> None:
            low = min(picks[i], size - 4)
            found = await store.fetch_archived(SK, range(low, low + 4))
            assert len(found) == 4

        await by_id(0)  # warm the pool and the caches of the database
        return {
            "fill s": filled,
            "search id": await median_ms(by_id, repeats),
            "search path": await median_ms(by_path, repeats),
            "search 3 words": await median_ms(by_words, repeats),
            "fetch 4": await median_ms(fetch, repeats),
        }
    finally:
        await store.close()


async def reset_postgres(url: str) -> None:
    db = Database.connect(url)
    try:
        await db.write(lambda conn: conn.execute(text("DROP SCHEMA public CASCADE")))
        await db.write(lambda conn: conn.execute(text("CREATE SCHEMA public")))
    finally:
        await db.dispose()


async def run(sizes: Sequence[int], repeats: int) -> list[tuple[str, dict[int, dict[str, float]]]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = {
            size: await measure(f"sqlite+aiosqlite:///{tmp}/recall-{size}.db", size, repeats)
            for size in sizes
        }
        results.append(("sqlite", sqlite))
    pg_url = os.environ.get(PG_ENV)
    if pg_url:
        postgres = {}
        for size in sizes:
            await reset_postgres(pg_url)
            postgres[size] = await measure(pg_url, size, repeats)
        results.append(("postgresql", postgres))
    return results


def table(results: list[tuple[str, dict[int, dict[str, float]]]]) -> str:
    lines = []
    for backend, by_size in results:
        sizes = sorted(by_size)
        low, high = sizes[0], sizes[-1]
        head = " | ".join(f"{s:,} msgs" for s in sizes)
        lines += [
            f"\n{backend} (median ms; fill in seconds; {search.CANDIDATES} candidates)",
            f"| measure | {head} | {high // 1000}K/{low // 1000}K |",
            "|---|" + "---|" * len(sizes) + "---|",
        ]
        for name in by_size[low]:
            cells = " | ".join(f"{by_size[s][name]:.2f}" for s in sizes)
            ratio = by_size[high][name] / by_size[low][name]
            lines.append(f"| {name} | {cells} | {ratio:.2f}x |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)
    print(table(asyncio.run(run(args.sizes, args.repeats))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
