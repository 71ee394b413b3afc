"""Per-run JSONL transcript files: a copy of each run's log, one event per line, never its truth.

A store given ``transcripts=DIR`` keeps ``DIR/<run_id>.jsonl`` beside its database: each line
is an event exactly as ``encode_event`` writes it, in seq order, for transcripts and restore
points a person or a tool reads as a file. The rules:

- **after commit only**: a commit only marks its run (``committed``); a background task then
  reads the run's events *from the store* after the file's last seq and appends them. No
  uncommitted event can reach the file, whatever the process does next.
- **it may lag**: a process killed before the task caught up leaves the file short; the next
  commit of that run (in any process with transcripts on) fills the gap from the store, and
  ``catch_up(run_id)`` does it on demand. A line cut by a crash is dropped and written again.
- **deleting it loses nothing**: the store holds every event; a missing file is written whole
  again at the run's next commit or ``catch_up``.

Writing the files never fails a commit: an error is logged and the file simply lags. Files are
appended in a worker thread (a line each event, flushed, not fsynced: the store is durable, the
file need not be). One process should write a directory: two processes appending the same
run's file could interleave their lines.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from .._logs import logger
from ..events import Event, encode_event
from .base import Broadcaster, RunLog

__all__ = ["TranscribingBroadcaster", "Transcripts"]

log = logger("fiduciary.stores")


class Transcripts:
    """The transcript files of one store's runs, in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], store: RunLog) -> None:
        self.directory = Path(directory)
        self._store = store
        self._dirty: dict[UUID, None] = {}  # runs with commits not in their files yet
        self._last: dict[UUID, int] = {}  # the last seq each file holds, as last written
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._closed = False
        self._writing = asyncio.Lock()  # one catch-up at a time: no line appended twice

    def path(self, run_id: UUID) -> Path:
        return self.directory / f"{run_id}.jsonl"

    def committed(self, run_id: UUID) -> None:
        """The store committed events of ``run_id`` (called on the event loop, after the
        commit): its file is brought up to date in the background."""
        if self._closed:
            return
        self._dirty[run_id] = None
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._write_forever(), name="fiduciary-transcripts"
            )

    async def catch_up(self, run_id: UUID) -> int:
        """Append to the file what the store committed after its last line; the file's last
        seq now (0: the run has no event)."""
        async with self._writing:
            return await self._catch_up(run_id)

    async def _catch_up(self, run_id: UUID) -> int:
        path = self.path(run_id)
        last = self._last.get(run_id)
        if last is None or not path.exists():
            last = await asyncio.to_thread(_last_seq, path)
        events = await self._store.read_events(run_id, after_seq=last)
        if events:
            lines = "".join(encode_event(e) + "\n" for e in events)
            await asyncio.to_thread(_append, self.directory, path, lines)
            last = events[-1].seq
        self._last[run_id] = last
        return last

    async def close(self) -> None:
        """Write what is marked, then stop (the store's ``close``, before it closes). The
        writing task is let finish, never cancelled: an append cut off in its thread would
        still happen, behind the task's back."""
        self._closed = True
        task, self._task = self._task, None
        if self._wake is not None:
            self._wake.set()
        if task is not None:
            await asyncio.shield(task)
        await self._drain()

    async def _write_forever(self) -> None:
        assert self._wake is not None
        while not (self._closed and not self._dirty):
            await self._wake.wait()
            self._wake.clear()
            await self._drain()

    async def _drain(self) -> None:
        while self._dirty:
            run_id = next(iter(self._dirty))
            del self._dirty[run_id]
            try:
                await self.catch_up(run_id)
            except BaseException as exc:  # the file lags; the store, the truth, is untouched
                self._last.pop(run_id, None)  # read from the file again next time
                if not isinstance(exc, Exception):
                    raise
                log.exception("the transcript of run %s could not be written", run_id)


class TranscribingBroadcaster(Broadcaster):
    """A store's broadcaster that also marks each published (committed) run for its file."""

    def __init__(self, transcripts: Transcripts) -> None:
        super().__init__()
        self.transcripts = transcripts

    def publish(self, run_id: UUID, events: Sequence[Event]) -> None:
        super().publish(run_id, events)
        if events:
            self.transcripts.committed(run_id)


def _last_seq(path: Path) -> int:
    """The seq of the file's last complete line (0: no file, or none); a line a crash cut
    short is removed first. Reads the file's tail only."""
    try:
        with path.open("rb+") as f:
            size = f.seek(0, os.SEEK_END)
            chunk = 1 << 16
            while True:  # a tail long enough to hold the last complete line whole
                start = max(0, size - chunk)
                f.seek(start)
                tail = f.read()
                end = tail.rfind(b"\n") + 1
                before = tail.rfind(b"\n", 0, max(0, end - 1))
                if start == 0 or before >= 0:
                    break
                chunk *= 4
            if end < len(tail):  # a partial last line: drop it
                f.truncate(start + end)
    except FileNotFoundError:
        return 0
    last = tail[:end].splitlines()[-1:] if end else []
    if not last or not last[0].strip():
        return 0
    seq = json.loads(last[0]).get("seq")
    return seq if isinstance(seq, int) else 0


def _append(directory: Path, path: Path, lines: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(lines)
        f.flush()
