"""Run the provider simulator standalone:

    python -m tests.simulator --port 9000 --window 8192 [--dialect vllm] \
        [--model gpt-4o-mini=8192:openai ...] [--chunk-delay 0.02] [--api-key sk-test] \
        [--stream-errors event] [--agent-turns 25] [-v]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from .agent import ScriptedAgent
from .models import DIALECTS, ModelSpec, Received
from .server import Simulator
from .shell_agent import ShellAgent


def _model_arg(text: str) -> tuple[str, int, str]:
    name, _, rest = text.partition("=")
    window, _, dialect = rest.partition(":")
    if not name or not window.isdigit():
        raise argparse.ArgumentTypeError("expected NAME=WINDOW[:DIALECT]")
    return name, int(window), dialect or "openai"


def _agent(turns: int) -> Callable[[dict[str, Any]], Any]:
    """One responder for every API: Messages bodies (tools with an `input_schema`) go to the
    Anthropic agent, Chat and Responses bodies to the shell agent."""
    messages_agent, shell_agent = ScriptedAgent(turns=turns), ShellAgent(turns=turns)

    def respond(body: dict[str, Any]) -> Any:
        tools = body.get("tools") or []
        if "input" not in body and any(isinstance(t, dict) and "input_schema" in t for t in tools):
            return messages_agent(body)
        return shell_agent(body)

    return respond


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.simulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument(
        "--window", type=int, default=128_000, help="window of unknown/default models"
    )
    parser.add_argument(
        "--dialect", choices=DIALECTS, default="openai", help="default model's dialect"
    )
    parser.add_argument("--token-factor", type=float, default=1.0)
    parser.add_argument("--no-stream-usage", action="store_true", help="never send the usage chunk")
    parser.add_argument(
        "--model",
        action="append",
        type=_model_arg,
        default=[],
        metavar="NAME=WINDOW[:DIALECT]",
        help="a configured model (repeatable)",
    )
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE chunks")
    parser.add_argument("--api-key", default=None, help="require this key (401 otherwise)")
    parser.add_argument(
        "--validate-messages",
        action="store_true",
        help="reject broken tool-call pairing with OpenAI's 400",
    )
    parser.add_argument(
        "--stream-errors",
        choices=("status", "event"),
        default="status",
        help="how a streamed request's overflow is reported (event: response.failed / data error)",
    )
    parser.add_argument(
        "--agent-turns",
        type=int,
        default=None,
        metavar="K",
        help="play a scripted agent: K shell tool calls per session, then a final answer "
        "(ScriptedAgent for Messages requests, ShellAgent for Chat and Responses ones)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print one line per request")
    args = parser.parse_args(argv)

    def spec(window: int, dialect: str) -> ModelSpec:
        return ModelSpec(
            window=window,
            dialect=dialect,
            token_factor=args.token_factor,
            stream_usage=not args.no_stream_usage,
            stream_errors=args.stream_errors,
        )

    sim = Simulator(
        models={name: spec(window, dialect) for name, window, dialect in args.model},
        default=spec(args.window, args.dialect),
        required_api_key=args.api_key,
        chunk_delay_s=args.chunk_delay,
        validate_messages=args.validate_messages,
        host=args.host,
        port=args.port,
    )
    if args.agent_turns is not None:
        sim.responder = _agent(args.agent_turns)
    if args.verbose:

        def log(rec: Received) -> None:
            extra = f" prompt_tokens={rec.prompt_tokens}" if rec.prompt_tokens is not None else ""
            summary = " [summary request]" if rec.is_summary else ""
            print(
                f"{rec.method} {rec.path} model={rec.model}{extra}{summary}",
                file=sys.stderr,
                flush=True,
            )

        sim.on_request = log

    stopped = threading.Event()

    def on_signal(*_: Any) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sim.start()
    print(f"provider simulator listening on {sim.base_url}", flush=True)
    try:
        while not stopped.wait(0.5):
            pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
