"""Who holds a lease, written so that a process can tell a dead holder on its own machine.

A lease expires `lease_ttl_s` after its holder stops renewing it, which is the only way to free
the lease of a crashed replica on another machine. On the same machine (same hostname, boot and
PID namespace) a process can do better: the holder's PID and start time say whether it is still
running. A restarted ctxgate (the same container, a respawned worker) thus takes over the
leases its crashed predecessor left at once instead of waiting for them to expire.

An owner id reads `host|pidns|boot|pid|start|nonce`. Anything else (ids given by tests or by an
older version) is never judged dead: only expiry frees it.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

_FIELDS = 6
# Nonces of the owners created in this process: two SessionLocks in one process (two apps in a
# test, an embedding) share the PID and start time but are distinct, live holders.
_LOCAL_NONCES: set[str] = set()


@dataclass(frozen=True, slots=True)
class Owner:
    host: str
    pidns: str
    boot: str
    pid: int
    start: str
    nonce: str

    def __str__(self) -> str:
        return "|".join((self.host, self.pidns, self.boot, str(self.pid), self.start, self.nonce))

    def same_machine(self, other: Owner) -> bool:
        """Whether both PIDs name processes of one PID namespace on one host."""
        return (self.host, self.pidns) == (other.host, other.pidns)


def new_owner() -> Owner:
    """An owner id for a SessionLocks of this process."""
    pid = os.getpid()
    nonce = uuid.uuid4().hex[:12]
    _LOCAL_NONCES.add(nonce)
    host = socket.gethostname().replace("|", "_")
    return Owner(host, _pid_namespace(), _boot_id(), pid, _start_time(pid), nonce)


def parse_owner(text: str) -> Owner | None:
    parts = text.split("|")
    if len(parts) != _FIELDS or not parts[3].isdigit():
        return None
    host, pidns, boot, pid, start, nonce = parts
    return Owner(host, pidns, boot, int(pid), start, nonce)


def holder_is_dead(holder_id: str, me: Owner) -> bool:
    """True only when `holder_id` surely names a process of this machine that has ended."""
    holder = parse_owner(holder_id)
    if holder is None or not holder.same_machine(me):
        return False
    if holder.boot and me.boot and holder.boot != me.boot:
        return True  # the machine rebooted since: every process of that boot is gone
    if holder.pid == me.pid:
        # Our own PID: either this process (a nonce it made) or a predecessor that had the
        # same PID (PID 1 in a restarted container).
        return holder.nonce not in _LOCAL_NONCES
    if not _alive(holder.pid):
        return True
    # The PID is in use: by the holder, or by a newer process that reused it.
    start = _start_time(holder.pid)
    return bool(holder.start and start and start != holder.start)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but a running one
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    # The state follows the command name in parentheses, which may hold spaces itself.
    return bool(stat) and stat.rpartition(")")[2].split()[:1] == ["Z"]


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" where /proc is absent)."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").replace("|", "_")
    except OSError:
        return ""


def _boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id").strip()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
