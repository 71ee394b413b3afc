"""Private: the SQLite store's WAL checkpoints, on a thread of their own.

In WAL mode a commit appends its pages to the WAL file; a checkpoint copies them into the
database file (an fsync of each file) so that the WAL can start again from its beginning.
SQLite's default is an automatic checkpoint inside the COMMIT that takes the WAL past 1,000
pages, on the committing thread: for ``SQLiteStore``, the event-loop thread, which then waits
for the copy and two fsyncs. ``Checkpointer`` moves that work to a thread of its own:

- the store's connection keeps SQLite's automatic checkpoint only as a bound, at
  ``BOUND_PAGES`` (four times SQLite's default), for when the thread falls behind;
- after a commit, once ``every_changes`` rows were written since the last wake-up (a cheap
  stand-in for the WAL's growth: ``sqlite3.Connection.total_changes``), the store wakes the
  thread (``wake``), which starts on first use and opens its own connection;
- the thread runs ``PRAGMA wal_checkpoint(PASSIVE)``: it never waits for, nor blocks, a reader
  or a writer of any process, and ``sqlite3`` releases the GIL while it works. A checkpoint
  that cannot finish (another process's checkpoint holds the lock, a reader holds an old
  snapshot) leaves the rest to the next one or to the bound.

A checkpoint changes nothing that is committed: the WAL stays the truth until its pages are in
the database file and fsynced, and a crash (``kill -9``) in the middle of one is recovered by
SQLite on the next open, as for its own automatic checkpoints. ``stop`` ends the thread (after
the checkpoint it may be running) and closes its connection; the store then checkpoints once
more on its own connection before closing it.
"""

from __future__ import annotations

import sqlite3
import threading

__all__ = ["BOUND_PAGES", "Checkpointer"]

BOUND_PAGES = 4000
"""The store connection's own ``wal_autocheckpoint``: the WAL's bound if the thread lags."""


class Checkpointer:
    """A thread that checkpoints the WAL of ``path`` when woken (see the module docstring)."""

    def __init__(self, path: str, *, busy_timeout_ms: int, every_changes: int = 500) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.every_changes = every_changes
        """Rows written (``total_changes``) between two wake-ups of the thread."""
        self.checkpoints = 0
        """Checkpoints the thread ran (for tests and benchmarks)."""
        self._ran = threading.Condition()
        self._asked = 0  # wake-ups so far
        self._served = 0  # the last wake-up a finished checkpoint started after
        self._mark = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def committed(self, total_changes: int) -> None:
        """After a commit on the store's connection: wake the thread if enough was written."""
        if total_changes - self._mark >= self.every_changes:
            self._mark = total_changes
            self.wake()

    def wake(self) -> None:
        """Ask for a checkpoint (the thread starts on first use)."""
        if self._stopping:
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="fiduciary-sqlite-checkpoint", daemon=True
            )
            self._thread.start()
        with self._ran:
            self._asked += 1
        self._wake.set()

    def wait_caught_up(self, timeout: float) -> bool:
        """Wait until a checkpoint started after the last wake-up has ended (for tests);
        False on timeout."""
        with self._ran:
            asked = self._asked
            return self._ran.wait_for(lambda: self._served >= asked, timeout)

    def stop(self) -> None:
        """End the thread, after the checkpoint it may be running. Idempotent."""
        self._stopping = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        try:
            # its own connection, made and used on this thread only
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None
            )
        except sqlite3.Error:
            return  # the store connection's automatic checkpoint (the bound) takes over
        try:
            while True:
                self._wake.wait()
                with self._ran:
                    self._wake.clear()
                    asked = self._asked
                if self._stopping:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    pass  # nothing is lost: the next checkpoint, or the bound, copies it
                else:
                    self.checkpoints += 1
                with self._ran:
                    self._served = asked
                    self._ran.notify_all()
        finally:
            conn.close()
