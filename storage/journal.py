"""The accounting journal: each usage record and charge appended to a local file as it is handed
to the write-behind, so that a process killed before its batch was written loses nothing that
a restart cannot replay.

One journal per writer and process, in a directory shared by the processes of one database:
`<name>.lock`, which the owner holds an exclusive `flock` on for its whole life, and segments
`<name>.<n>.log` of lines `[seq, record]`. The kernel releases the lock when the process dies,
however it dies, so a starting process knows a journal whose lock it can take to be dead and
replays it (storage.replay). What the database already holds is known by the journal's mark,
the highest seq written, which each batch moves in its own transaction: a replay applies only
what lies above it, and moves it the same way, so nothing is counted twice.

An append is one `write` to a file opened for appending (a few microseconds, no fsync): it
survives the process, not the host losing power. Segments are started anew past
`SEGMENT_BYTES` and removed once the mark is past their last line.

Imports the standard library and orjson only.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

logger = logging.getLogger("ctxgate.storage")

SEGMENT_BYTES = 1 << 20
_LOCK = ".lock"
_LOG = ".log"


@dataclass(frozen=True, slots=True)
class Mark:
    """Every record of journal `journal` up to `seq` is written (or was given up on)."""

    journal: str
    seq: int


def _lock(path: Path, *, create: bool = False) -> int | None:
    """An open descriptor holding an exclusive flock on `path`, or None when another has it."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class Journal:
    """This process's journal for one kind of record ("usage", "charge")."""

    def __init__(self, directory: Path, kind: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        """Create the journal, its lock held before its name is visible: a starting process
        that lists the directory meanwhile cannot take it for a dead one's."""
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.name = f"{kind}-{uuid.uuid4().hex}"
        self._segment_bytes = segment_bytes
        hidden = directory / f".{self.name}{_LOCK}"
        fd = _lock(hidden, create=True)
        if fd is None:  # a fresh uuid: nobody else can hold it
            raise OSError(f"cannot lock {hidden}")
        self._lock_fd = fd
        hidden.rename(directory / f"{self.name}{_LOCK}")  # the inode, and its lock, stay
        self._seq = 0
        self._segment = -1
        self._segments: list[tuple[int, int]] = []  # (segment, last seq in it), oldest first
        self._fd = -1
        self._bytes = 0
        self._start_segment()

    def _path(self, segment: int) -> Path:
        return self.directory / f"{self.name}.{segment}{_LOG}"

    def _start_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._segment += 1
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd = os.open(self._path(self._segment), flags, 0o600)
        self._segments.append((self._segment, self._seq))
        self._bytes = 0

    def append(self, record: Any) -> int:
        """Write `record` (a dataclass or JSON value) as the next line; its seq. Raises OSError."""
        seq = self._seq + 1
        line = orjson.dumps([seq, record], option=orjson.OPT_APPEND_NEWLINE)
        os.write(self._fd, line)
        self._seq = seq
        self._bytes += len(line)
        segment, _ = self._segments[-1]
        self._segments[-1] = (segment, seq)
        return seq

    def done(self, seq: int) -> None:
        """The database holds everything up to `seq`: drop the segments it covers."""
        if self._bytes >= self._segment_bytes:
            self._start_segment()
        while len(self._segments) > 1 and self._segments[0][1] <= seq:
            segment, _ = self._segments.pop(0)
            with contextlib.suppress(FileNotFoundError):
                self._path(segment).unlink()

    def close(self, *, remove: bool) -> None:
        """Stop appending; with `remove` (everything is written) the files go too."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if remove:
            for segment, _ in self._segments:
                with contextlib.suppress(FileNotFoundError):
                    self._path(segment).unlink()
            with contextlib.suppress(FileNotFoundError):
                (self.directory / f"{self.name}{_LOCK}").unlink()
        os.close(self._lock_fd)


@dataclass(slots=True)
class DeadJournal:
    """A journal whose owner is gone, locked by this process until `release`."""

    directory: Path
    name: str
    lock_fd: int

    @property
    def kind(self) -> str:
        return self.name.split("-", 1)[0]

    def segments(self) -> list[Path]:
        found = self.directory.glob(f"{self.name}.*{_LOG}")
        return sorted(found, key=lambda p: int(p.name[len(self.name) + 1 : -len(_LOG)]))

    def lines(self) -> Iterator[tuple[int, Any]]:
        """(seq, record) in order; a line cut short (the host lost power) ends the journal."""
        for path in self.segments():
            for raw in path.read_bytes().splitlines():
                try:
                    seq, record = orjson.loads(raw)
                except (orjson.JSONDecodeError, ValueError, TypeError):
                    logger.warning("accounting journal %s: unreadable line skipped", path)
                    continue
                yield int(seq), record

    def remove(self) -> None:
        """Delete its files (after the database took what they held) and let it go."""
        for path in self.segments():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / f"{self.name}{_LOCK}").unlink()
        self.release()

    def release(self) -> None:
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def dead_journals(directory: Path) -> Iterator[DeadJournal]:
    """The journals in `directory` whose owner no longer holds their lock, each locked by this
    process as it is handed out (the caller removes or releases it)."""
    if not directory.is_dir():
        return
    for lock in sorted(directory.glob(f"*{_LOCK}")):
        if lock.name.startswith("."):
            continue
        try:
            fd = _lock(lock)
        except FileNotFoundError:
            continue  # replayed and removed by another process meanwhile
        if fd is None:
            continue  # alive
        if not lock.exists():  # removed between the listing and the lock
            os.close(fd)
            continue
        yield DeadJournal(directory, lock.name[: -len(_LOCK)], fd)
