"""The agent as a process of `ctxgate run`: whether its command can run (the shell's 126 and
127), starting it so that it dies with ctxgate, and signals that end ctxgate quietly before it
starts. Standard library only: `cli.py` imports this before the web stack loads.

A wrapper killed with SIGKILL cannot pass anything on, and an agent left behind keeps talking
to a port nobody serves. On Linux the agent is therefore started through a small guard that
asks the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`, kept across `exec`), then
becomes the agent itself: any binary gets it, and the agent's pid is the one ctxgate watches.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

# Runs in the child before the agent: `python -I -S -c GUARD PARENT AGENT ARGS…`. The parent
# may have died before the request was made, hence the check that it is still the parent.
GUARD = """\
import ctypes, os, signal, sys
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
if os.getppid() != int(sys.argv[1]):
    os._exit(137)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"ctxgate: {sys.argv[2]}: {exc.strerror}\\n")
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


class Stopped(BaseException):
    """A signal arrived before the agent ran (or after it ended): ctxgate ends with 128 + N."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass(frozen=True, slots=True)
class Unrunnable:
    code: int  # 126: found but cannot be run; 127: not found
    message: str


def unrunnable(command: str, path: str | None) -> Unrunnable | None:
    """Why `command` cannot be run with `path` as a shell would say it, else None."""
    if shutil.which(command, path=path) is not None:
        return None
    named = os.sep in command
    places = (
        [command]
        if named
        else [os.path.join(d or ".", command) for d in (path or os.defpath).split(os.pathsep)]
    )
    for place in places:
        if named and os.path.isdir(place):
            return Unrunnable(126, f"{command}: Is a directory")
        if os.path.isfile(place):
            return Unrunnable(126, f"{command}: Permission denied")
    if named:
        return Unrunnable(127, f"{command}: No such file or directory")
    return Unrunnable(127, f"{command}: command not found")


def stop_quietly() -> None:
    """From now on, a signal ctxgate would pass on raises Stopped (a signal the caller left
    ignored stays ignored)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    for signum in FORWARDED:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, stop)


def start_agent(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """The agent, started so that it dies with this process where the kernel allows it."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return subprocess.Popen(list(argv), env=dict(env))
    guard = [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid())]
    return subprocess.Popen([*guard, *argv], env=dict(env))
