"""`ctxgate run AGENT [ARGS…]`: the agent run through ctxgate, with one command.

ctxgate starts embedded on a free loopback port (or `--attach URL` uses a server already
running), the agent is started pointed at it (agents.py) with the terminal, its arguments and
the user's credentials as they are, and ctxgate's exit code is the agent's. A signal meant for
the agent reaches it once: Ctrl-C at a terminal goes to the whole foreground group (the agent
included), so ctxgate only waits; a signal sent to ctxgate alone (SIGTERM from a supervisor,
SIGINT from `kill`) is passed on. Once the agent has exited, a summary of what ctxgate did
goes to stderr. A signal before the agent starts ends ctxgate quietly with 128 + N, its
server stopped; the agent dies with ctxgate even when ctxgate is killed (process.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import FrameType
from typing import TextIO

import httpx

from proxy.config_file import load_settings
from proxy.edge.run.agents import agent_for, launch, not_found
from proxy.edge.run.embedded import EmbeddedServer, data_dir, free_port, log_to_file, run_settings
from proxy.edge.run.figures import Figures, read_figures, summary
from proxy.edge.run.process import FORWARDED, Stopped, start_agent, unrunnable
from session.config.settings import Settings

# What a terminal (or the shell, for a hangup) sends the whole foreground job at once.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class RunOptions:
    argv: Sequence[str]  # the agent and its own arguments
    attach: str | None = None  # a running ctxgate's URL
    config: str | None = None  # a config file instead of the zero-config settings
    port: int | None = None  # the embedded server's port (default: a free one)


def exit_code(returncode: int) -> int:
    """The shell's convention: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _terminal_signals_group() -> bool:
    """Whether a Ctrl-C at the terminal reaches the agent by itself: ctxgate (and so the
    agent, in its process group) is the terminal's foreground group."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError):
        return False


@contextmanager
def signals_passed_to(child: subprocess.Popen[bytes]) -> Iterator[None]:
    from_terminal = _terminal_signals_group()

    def forward(signum: int, frame: FrameType | None) -> None:
        # A keyboard signal the terminal already sent the whole group must not arrive twice
        # (a second Ctrl-C makes some agents quit at once).
        if from_terminal and signum in GROUP_SIGNALS:
            return
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_child(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run the agent to its end with ctxgate's terminal; its exit code."""
    child = start_agent(argv, env)
    try:
        with signals_passed_to(child):
            returncode = child.wait()
    except Stopped as stopped:  # came between the start and the handlers: the agent's too
        child.send_signal(stopped.signum)
        returncode = child.wait()
    return exit_code(returncode)


def attached_base(url: str) -> str:
    """The server's root URL from what a user may pass (with or without /v1)."""
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def read_remote(base: str) -> Figures:
    answer = httpx.get(f"{base}/metrics", timeout=10, trust_env=False)
    answer.raise_for_status()
    return read_figures(answer.text)


def _fail(stderr: TextIO, message: str, code: int) -> int:
    print(f"ctxgate: {message}", file=stderr)
    return code


def run(options: RunOptions, environ: Mapping[str, str], stderr: TextIO = sys.stderr) -> int:
    """`ctxgate run`: the agent's exit code (126 or 127 when it cannot be run, as a shell
    says; 128 + N for a signal N before it started)."""
    argv = list(options.argv)
    cannot = unrunnable(argv[0], environ.get("PATH"))
    if cannot is not None:
        # Not found by name: say how to install it when it is an agent ctxgate knows.
        missing = cannot.code == 127 and os.sep not in argv[0]
        return _fail(stderr, not_found(argv[0]) if missing else cannot.message, cannot.code)
    try:
        return _run(options, argv, environ, stderr)
    except Stopped as stopped:
        return 128 + stopped.signum


def _run(options: RunOptions, argv: list[str], environ: Mapping[str, str], stderr: TextIO) -> int:
    name = os.path.basename(argv[0])
    if options.attach:
        return _run_attached(argv, attached_base(options.attach), environ, stderr)
    home = data_dir(environ)
    home.mkdir(parents=True, exist_ok=True)
    port = options.port or free_port()
    if options.config:
        settings = load_settings(options.config, environ)
    else:
        settings = run_settings(environ, home, agent_for(argv[0]).provider, port)
    log_path = home / "run.log"
    log_to_file(log_path, settings.logging)
    server = _embedded(settings, port)
    try:
        try:
            server.start()
        except RuntimeError as exc:
            return _fail(stderr, f"{exc} ({log_path})", 1)
        dashboard = f"{server.base}/dashboard"
        print(f"ctxgate: serving {name} on {server.base}; dashboard {dashboard}", file=stderr)
        plan = launch(argv, server.base, environ)
        code = run_child(plan.argv, {**environ, **plan.env})
        figures = read_figures(server.metrics_text())
    finally:
        server.stop()
    key = settings.auth.admin_key
    where = [
        f"dashboard: {dashboard} while ctxgate runs"
        + (f" (admin key {key})" if key and not options.config else ""),
        f"sessions: {_where_stored(settings.storage.url)}; log: {log_path}",
    ]
    print(summary(figures, agent=name, code=code, where=where), end="", file=stderr)
    return code


def _where_stored(url: str) -> str:
    """The SQLite file, or which database (a PostgreSQL URL may hold a password)."""
    scheme, _, path = url.partition(":///")
    return path if scheme.startswith("sqlite") else "the configured PostgreSQL database"


def _embedded(settings: Settings, port: int) -> EmbeddedServer:
    """The server on loopback at `port`, whatever a given config file says."""
    server = replace(settings.server, host="127.0.0.1", port=port)
    return EmbeddedServer(replace(settings, server=server))


def _run_attached(argv: list[str], base: str, environ: Mapping[str, str], stderr: TextIO) -> int:
    name = os.path.basename(argv[0])
    try:
        before = read_remote(base)
    except httpx.HTTPError as exc:
        return _fail(stderr, f"cannot reach ctxgate at {base}: {exc}", 1)
    plan = launch(argv, base, environ)
    code = run_child(plan.argv, {**environ, **plan.env})
    try:
        figures = read_remote(base).since(before)
        note = "figures are the server's, other clients' requests in the meantime included"
    except httpx.HTTPError as exc:
        figures, note = Figures(), f"no figures: {base}/metrics did not answer ({exc})"
    where = [f"dashboard: {base}/dashboard", note]
    print(summary(figures, agent=name, code=code, where=where), end="", file=stderr)
    return code
