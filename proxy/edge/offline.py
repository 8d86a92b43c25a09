"""`ctxgate compress FILE`: run the configured engine on request bodies, outside the proxy.

Reads a chat request body (or one per line), compresses it with the configured engine and
summarizer, writes the resulting body as JSON to stdout and one line of figures to stderr.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import orjson

from compression import CompressionContext, counter_for_model
from proxy.doors.chat.request import parse_chat_request
from proxy.doors.registry import BY_API, summary_door
from proxy.edge.services import build_engine
from proxy.provider.transport import new_http_transport
from proxy.provider.upstream import Upstream
from session.config.settings import Settings
from session.errors import ProxyError
from session.ports.frontdoor import WireRequest
from session.ports.headers import upstream_request_headers
from session.summarizer import UpstreamSummarizer, summary_route


def _bodies(path: str) -> list[bytes]:
    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    stripped = data.strip()
    try:
        orjson.loads(stripped)
        return [stripped]
    except orjson.JSONDecodeError:
        return [line for line in stripped.splitlines() if line.strip()]


CHAT = BY_API["chat"]


async def compress_file(
    settings: Settings, path: str, *, model: str | None, force: bool, focus: str | None
) -> int:
    engine = build_engine(settings)
    http = new_http_transport(settings.server.upstream_client)
    status = 0
    try:
        for raw in _bodies(path):
            try:
                request = parse_chat_request(raw)
                if model:
                    request = parse_chat_request(orjson.dumps({**request.body, "model": model}))
                out = await _compress_one(settings, engine, http, request, force, focus)
            except ProxyError as exc:
                print(f"ctxgate: {exc.message}", file=sys.stderr)
                status = 1
                continue
            sys.stdout.buffer.write(orjson.dumps(out) + b"\n")
    finally:
        await http.aclose()
    return status


async def _compress_one(
    settings: Settings,
    engine: Any,
    http: Any,
    request: WireRequest,
    force: bool,
    focus: str | None,
) -> dict[str, Any]:
    rule = settings.rule_for(request.model)
    if rule is None:
        raise ProxyError(f"the model '{request.model}' matches no rule in the config")
    summary = settings.compression.summary
    upstreams = {name: Upstream(up, http) for name, up in settings.upstreams.items()}
    upstream, summary_model = summary_route(summary, upstreams, rule.upstream, request.model)
    summarizer = UpstreamSummarizer(
        upstream,
        summary_door(upstream.settings.apis, CHAT),
        summary_model,
        upstream_request_headers([], upstream.settings),
        summary.timeout_s,
    )
    counter = counter_for_model(
        request.model, encoding=rule.encoding, encodings_dir=settings.tokens.encodings_dir
    )
    ctx = CompressionContext(
        model=request.model,
        context_length=rule.context_length,
        max_output_tokens=request.max_tokens or rule.max_output_tokens,
        counter=counter,
        summarize=summarizer,
        tools=request.tools,
        trigger="offline",
        force=force,
        focus=focus,
        now=time.time(),
    )
    started = time.perf_counter()
    result = await engine.compress(request.messages, ctx)
    took = (time.perf_counter() - started) * 1000
    print(
        f"{result.tokens_before} -> {result.tokens_after} tokens, "
        f"{len(request.messages)} -> {len(result.messages)} messages, "
        f"outcome {result.outcome}, {took:.0f} ms" + (f" ({result.error})" if result.error else ""),
        file=sys.stderr,
    )
    return {**request.body, "messages": result.messages}
