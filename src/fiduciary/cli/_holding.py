"""Who has a SQLite file open: the processes that use one for their lifetime (``serve``,
``demo``, ``chat``, ``mcp``) hold a shared lock on a sidecar file, ``<db>.lock``, and write a
line there saying who they are; ``demo --reset`` deletes the file only under the exclusive
lock, so never under a live process (which would go on writing to a file nobody can open
again).

``flock`` locks belong to the open file: the system releases them when their process ends,
however it ends, so a crash leaves no stale lock (only a stale line, which is skipped: its pid
is not alive).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HeldError", "exclusive", "holding"]


class HeldError(Exception):
    """The file is held by other processes; ``holders`` says which, as far as is known."""

    def __init__(self, db: Path, holders: list[str]) -> None:
        who = ", ".join(holders) if holders else "a process that did not say which"
        super().__init__(f"{db} is open in another process ({who})")
        self.holders = holders


def _lock_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _holders(fd: int) -> list[str]:
    """``pid N (command)`` for each line of a live process."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    found = []
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        pid_text, _, command = line.partition(" ")
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _alive(int(pid_text)):
            found.append(f"pid {pid_text}: {command}")
    return list(dict.fromkeys(found))


@contextlib.contextmanager
def holding(db: Path, command: str) -> Iterator[None]:
    """Hold ``db`` for a block: a shared lock, and a line naming this process."""
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(_lock_path(db), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a reset deletes the file
        os.write(fd, f"{os.getpid()} {' '.join(command.split())}\n".encode())
        yield
        with contextlib.suppress(OSError):  # the last one out clears the lines
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(db: Path) -> Iterator[None]:
    """``db`` for this process alone for a block, or ``HeldError`` at once naming who has it."""
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(_lock_path(db), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HeldError(db, _holders(fd)) from None
        os.ftruncate(fd, 0)  # nobody holds it: every line is stale
        yield
    finally:
        os.close(fd)
