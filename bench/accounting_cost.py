"""What keeping accounting through a kill -9 costs the process: the journal (each record
appended to a local file as it is handed over, half-second linger kept) against a short
linger (no journal, batches written every `--short-linger-s`).

One SessionStore on a SQLite file, usage records and charges handed over at `--rate` per
second (one worker's share of 50 requests/s over two) for `--seconds`; the process's CPU time
per request is reported, and the cost of one journal append on its own.

    PYTHONPATH=. python bench/accounting_cost.py
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from storage import SessionKey, SessionStore, UsageRecord
from storage.journal import Journal
from storage.rows.charges import ChargeRow


def record(i: int) -> UsageRecord:
    sk = SessionKey("anon", f"s{i % 8}")
    return UsageRecord(sk, "gpt-test", 1000 + i, 50, 12, at=time.time())


def charge(i: int) -> ChargeRow:
    sk = SessionKey("anon", f"s{i % 8}")
    return ChargeRow(sk, time.time(), "gpt-test", "request", True, 900, 100, 0, 50)


async def run(journal: bool, linger_s: float, rate: float, seconds: float) -> float:
    """CPU seconds per request, for one way of writing."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        journal_dir = Path(tmp) / "journals" if journal else None
        store = await SessionStore.open(url, journal_dir=journal_dir, linger_s=linger_s)
        n = int(rate * seconds)
        started_cpu = time.process_time()
        started = time.monotonic()
        for i in range(n):
            store.record_usage_later(record(i))
            store.record_charges_later([charge(i)])
            await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
        await store.flush()
        cpu = time.process_time() - started_cpu
        await store.close()
        return cpu / n


def append_cost(count: int = 20_000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp), "usage")
        r = record(0)
        started = time.perf_counter()
        for _ in range(count):
            journal.append(r)
        took = time.perf_counter() - started
        journal.close(remove=True)
        return took / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=25.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--short-linger-s", type=float, default=0.05)
    args = parser.parse_args()
    print(f"journal append: {append_cost() * 1e6:.1f} us per record")
    ways = {
        "no journal, 0.5 s linger (loses up to ~0.5 s)": (False, 0.5),
        "journal, 0.5 s linger": (True, 0.5),
        f"no journal, {args.short_linger_s} s linger": (False, args.short_linger_s),
    }
    for name, (journal, linger) in ways.items():
        per = asyncio.run(run(journal, linger, args.rate, args.seconds))
        print(f"{name}: {per * 1e6:.0f} us CPU per request (usage + charge)")


if __name__ == "__main__":
    main()
