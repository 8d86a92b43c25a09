"""An upstream that answers every chat completion at once with the same short answer.

For throughput benchmarks on a small machine: the provider simulator counts every prompt's
tokens (about 4.6 ms of CPU for a 64K history, more than ctxgate spends on it), so on 2 cores
it, not ctxgate, would set the pace. This reads the body and answers a fixed completion whose
usage is a byte-based guess at the prompt's tokens, as cheaply as uvicorn allows.

    .venv/bin/python bench/canned_upstream.py PORT
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

HEADERS = [(b"content-type", b"application/json")]


def answer(prompt_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-canned",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok: canned"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 3,
                "total_tokens": prompt_tokens + 3,
            },
        }
    )


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    size = 0
    more = True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = answer(size // 4) if scope["path"].endswith("/chat/completions") else b"{}"
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": body})


def main() -> int:
    import uvicorn

    port = int(sys.argv[1])
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools",
        timeout_keep_alive=120,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
