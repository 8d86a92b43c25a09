"""ctxgate's resident memory with many long sessions (what the process holds per session).

    python bench/memory.py [--sessions 300] [--tokens 150000] [--held-mb 1024 128 32]
                           [--parsed-mb 16 0]

Starts the provider simulator in this process and `ctxgate serve` as a child process (so its
RSS is its own), sends one request of `--tokens` tokens for each of `--sessions` sessions, and
prints the child's RSS before and after, once per `server.held_request_bytes` and
`server.parsed_request_bytes` value.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.servers import free_port
from tests.simulator import ModelSpec, Simulator

MODEL = "memory-bench"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def history(tokens: int, session: int) -> list[dict[str, str]]:
    """About `tokens` tokens of alternating turns (o200k: ~1 token per short word)."""
    messages = [{"role": "system", "content": f"You are agent {session}."}]
    turn = 0
    while turn * 500 < tokens:
        words = " ".join(f"w{session}x{turn}y{n}" for n in range(125))
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": words})
        turn += 1
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "continue"})
    return messages


def run(
    sim: Simulator, sessions: int, tokens: int, held_mb: int, parsed_mb: int
) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "upstreams": {"sim": {"base_url": sim.base_url}},
            "models": [{"match": "*", "upstream": "sim", "context_length": 4 * tokens}],
            "server": {
                "held_request_bytes": held_mb * 1024 * 1024,
                "parsed_request_bytes": parsed_mb * 1024 * 1024,
            },
            "storage": {"url": f"sqlite+aiosqlite:///{tmp}/bench.db"},
            "compression": {"engine": "passthrough"},
            "logging": {"level": "warning"},
        }
        path = Path(tmp, "config.yaml")
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        ctxgate = Path(sys.executable).with_name("ctxgate")
        child = subprocess.Popen(
            [str(ctxgate), "serve", "--config", str(path), "--port", str(port)],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    if httpx.get(base + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            idle = rss_mb(child.pid)
            with httpx.Client(timeout=120) as client:
                for n in range(sessions):
                    body = {"model": MODEL, "messages": history(tokens, n)}
                    answer = client.post(
                        base + "/v1/chat/completions", json=body, headers={"x-session-id": f"s{n}"}
                    )
                    answer.raise_for_status()
            time.sleep(1.0)  # the usage write-behind
            loaded = rss_mb(child.pid)
            peak = loaded
            return idle, loaded, peak
        finally:
            child.terminate()
            child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--held-mb", type=int, nargs="+", default=[1024, 128, 32])
    parser.add_argument("--parsed-mb", type=int, nargs="+", default=[16])
    args = parser.parse_args()
    spec = ModelSpec(window=8 * args.tokens)
    with Simulator(models={MODEL: spec}) as sim:
        body_kb = len(httpx.Request("POST", "/", json=history(args.tokens, 0)).content) / 1024
        print(
            f"{args.sessions} sessions, one {args.tokens:,}-token request each ({body_kb:.0f} KB)"
        )
        for held in args.held_mb:
            for parsed in args.parsed_mb:
                idle, loaded, _ = run(sim, args.sessions, args.tokens, held, parsed)
                print(
                    f"held_request_bytes {held:>4} MB, parsed_request_bytes {parsed:>3} MB: "
                    f"RSS idle {idle:.0f} MB, after {loaded:.0f} MB (+{loaded - idle:.0f} MB)"
                )
                sim.clear()


if __name__ == "__main__":
    main()
