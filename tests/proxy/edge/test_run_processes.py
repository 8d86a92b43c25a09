"""`ctxgate run` as processes: a signal during its start-up, an agent that cannot be run, and
ctxgate killed with SIGKILL while its agent runs. Real processes throughout (a small Python
script as the agent, the simulator as the provider)."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proxy.edge.test_launcher import ctxgate, environment
from tests.servers import free_port
from tests.simulator import Simulator

# Writes its pid where told, then waits to be ended.
SLEEPER = """\
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
"""


# The same in sh, for the signal test: a signal that lands while a Python agent's interpreter
# is still starting makes it print its own traceback (as it would under a shell), which is
# not ctxgate's; sh ends quietly whenever the signal lands.
SH_SLEEPER = """\
echo $$ > "$1"
exec sleep 120
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ctxgate(*args),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def _gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie nobody reaped yet has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return True
    return fields[0] in ("Z", "X")


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _startup_s(tmp_path: Path, env: dict[str, str]) -> float:
    """How long ctxgate takes here from its start to its agent's."""
    script = tmp_path / "sleeper.sh"
    script.write_text(SH_SLEEPER)
    pid_file = tmp_path / "timing.pid"
    began = time.monotonic()
    proc = _start(["/bin/sh", str(script), str(pid_file)], env)
    while not pid_file.exists():
        assert proc.poll() is None and time.monotonic() - began < 120, proc.communicate()
        time.sleep(0.01)
    took = time.monotonic() - began
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    return took


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_ends_ctxgate_quietly_and_stops_its_server(
    tmp_path: Path, signum: int
) -> None:
    script = tmp_path / "sleeper.sh"
    script.write_text(SH_SLEEPER)
    with Simulator() as sim:
        env = environment(tmp_path, sim)
        took = _startup_s(tmp_path, env)
        during = 0
        for fraction in (0.15, 0.35, 0.55, 0.75, 0.9):
            pid_file = tmp_path / f"agent-{fraction}.pid"
            port = free_port()
            proc = _start(["--port", str(port), "/bin/sh", str(script), str(pid_file)], env)
            time.sleep(took * fraction)
            proc.send_signal(signum)
            _, stderr = proc.communicate(timeout=60)
            assert "Traceback" not in stderr, (fraction, stderr)
            assert proc.returncode == 128 + signum, (fraction, proc.returncode, stderr)
            assert _refused(port), "the embedded server outlived ctxgate"
            if pid_file.exists():  # the agent had started: it got the signal too
                assert _gone(int(pid_file.read_text()))
            else:
                during += 1
    assert during >= 3, f"only {during} signals arrived during start-up ({took:.2f}s)"


def test_an_agent_that_cannot_be_run_exits_as_a_shell_would(tmp_path: Path) -> None:
    plain = tmp_path / "not-executable.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(stat.S_IRUSR | stat.S_IWUSR)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lister").write_text("#!/bin/sh\nexit 0\n")  # on PATH, not executable
    with Simulator() as sim:
        env = environment(tmp_path, sim)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        cases = {
            str(plain): (126, "Permission denied"),
            str(tmp_path): (126, "Is a directory"),
            "lister": (126, "Permission denied"),
            str(tmp_path / "absent"): (127, "No such file or directory"),
            "no-such-agent-here": (127, "command not found"),
        }
        for command, (code, words) in cases.items():
            done = subprocess.run(
                ctxgate(command), env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == code, (command, done.returncode, done.stderr)
            assert f"{command}: {words}" in done.stderr


def test_the_agent_dies_with_ctxgate_killed_by_sigkill(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    pid_file = tmp_path / "agent.pid"
    with Simulator() as sim:
        proc = _start([sys.executable, str(script), str(pid_file)], environment(tmp_path, sim))
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        agent = int(pid_file.read_text())
        assert not _gone(agent)
        proc.kill()
        proc.communicate(timeout=30)
        killed = time.monotonic()
        while not _gone(agent) and time.monotonic() - killed < 3:
            time.sleep(0.02)
        alive = not _gone(agent)
        if alive:
            os.kill(agent, signal.SIGKILL)
    assert not alive, "the agent outlived ctxgate by more than 3 s"
