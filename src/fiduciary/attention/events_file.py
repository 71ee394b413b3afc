"""``EventsFile``: events appended to a JSON lines file, as a source (offline, or fed by a
script of your own).

Each line is one event: ``id``, ``type`` and ``at`` (ISO 8601; without an offset it is UTC) are
required, ``data`` (an object), ``principal`` and ``role`` (``act``, ``consequence``,
``context``, ``flush``; ``context`` by default) are optional, and any other key — a labelled
set's ``label`` and ``note``, a ``source`` — is ignored: the event belongs to this source.

The cursor is the number of lines taken. Only complete lines (ending in a newline) are read, so a
line being appended is never read half-written; blank lines count but yield nothing. A line that
is not such an event is a ``PermanentError`` naming the file and the line: the source stops there,
its cursor before that line, and goes on from it once the line is fixed. ``once`` reads to the
end and stops; otherwise the file is read again every ``every`` seconds (a missing file reads as
empty until it appears).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from .types import Batch, Incoming, PermanentError, Role

__all__ = ["EventsFile"]

Sleep = Callable[[float], Awaitable[None]]

_ROLES: dict[str, Role] = {role: role for role in get_args(Role)}


class EventsFile:
    """The events of a JSON lines file (see the module docstring)."""

    def __init__(
        self,
        path: Path | str,
        *,
        name: str = "file",
        every: float = 5.0,
        size: int = 64,
        sleep: Sleep = asyncio.sleep,
        once: bool = False,
    ) -> None:
        self.path = Path(path)
        self._name = name
        self._every = every
        self._size = max(1, size)
        self._sleep = sleep
        self._once = once

    @property
    def name(self) -> str:
        return self._name

    async def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        taken = _lines_taken(cursor)
        while True:
            lines = self._complete_lines()
            while taken < len(lines):
                end = min(len(lines), taken + self._size)
                events: list[Incoming] = []
                try:
                    for index in range(taken, end):
                        event = self._event(index + 1, lines[index])
                        if event is not None:
                            events.append(event)
                        taken = index + 1
                except PermanentError:
                    if events:  # the good lines before the bad one are taken
                        yield Batch(events=tuple(events), cursor=str(taken))
                    raise
                yield Batch(events=tuple(events), cursor=str(taken))
            if self._once:
                return
            await self._sleep(self._every)

    def _complete_lines(self) -> list[str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise PermanentError(f"cannot read {self.path}: {exc}") from exc
        return text.split("\n")[:-1]  # the last piece has no newline yet: not a complete line

    def _event(self, number: int, line: str) -> Incoming | None:
        if not line.strip():
            return None
        where = f"{self.path}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PermanentError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(raw, Mapping):
            raise PermanentError(f"{where}: an event is a JSON object")
        missing = [k for k in ("id", "type", "at") if not isinstance(raw.get(k), str)]
        if missing:
            raise PermanentError(
                f"{where}: id, type and at must be strings (not so: {', '.join(missing)})"
            )
        try:
            at = datetime.fromisoformat(raw["at"])
        except ValueError as exc:
            raise PermanentError(f"{where}: at is not an ISO 8601 time") from exc
        data: Any = raw.get("data", {})
        if not isinstance(data, Mapping):
            raise PermanentError(f"{where}: data must be an object")
        role = _ROLES.get(str(raw.get("role", "context")))
        if role is None:
            raise PermanentError(f"{where}: role must be one of {', '.join(_ROLES)}")
        principal = raw.get("principal")
        if principal is not None and not isinstance(principal, str):
            raise PermanentError(f"{where}: principal must be a string")
        return Incoming(
            id=raw["id"],
            source=self._name,
            type=raw["type"],
            at=at if at.tzinfo is not None else at.replace(tzinfo=UTC),
            data=dict(data),
            principal=principal,
            role=role,
        )


def _lines_taken(cursor: str | None) -> int:
    if cursor is None:
        return 0
    try:
        return max(0, int(cursor))
    except ValueError as exc:
        raise PermanentError(f"an events file's cursor is a line count, not {cursor!r}") from exc
