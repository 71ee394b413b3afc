"""The decision feed, from the consumer's side: an async iterator that survives restarts.

``decision_feed(url, api_key=...)`` follows a server's ``GET /attention/decisions`` (SSE) and
yields ``FeedItem``s: each ``decision`` and ``dead_letter`` with its data and ``cursor`` (the
decision's seq), and a ``cursor`` item for each heartbeat of a quiet feed. The rules, as the
seed's ``decisionFeed`` states them:

- **persist the cursor of every item before acting on the next one**: given ``cursor=`` (a
  ``FileCursor`` or any ``CursorStore``), the iterator does it itself — the cursor of an item is
  saved when the consumer asks for the next one, so an item being acted on when the consumer
  dies is delivered again after a restart (at least once);
- **dedup on ``event_id``** (the decision's id): a redelivered item has the same one;
- **resume from the persisted cursor**: a new iterator (a new process) starts after it, with
  ``Last-Event-ID``; a cursor of None starts from the first decision.

A connection that fails, ends, or stays silent for ``idle_seconds`` (twice the server's
heartbeat by default) is opened again from the cursor, after a pause that doubles from
``retry_seconds`` up to ``max_retry_seconds`` and resets once an item arrives. A refused key
(401, 403), or a server without the feed (404), is a ``FeedRefusedError``: retrying cannot
help. ``mcp_decision_feed`` yields the same
items from an MCP server's ``attention.decision`` or ``attention.dead_letter`` events
(``McpEvents``, extra ``mcp``). The HTTP client needs httpx (extra ``server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the decision feed's client needs httpx: pip install 'fiduciary[server]'"
    ) from exc

from ..events import parse_sse
from ..exceptions import FiduciaryError

if TYPE_CHECKING:
    from mcp import Client

    from .mcp_events import McpEventsExtension

__all__ = [
    "CursorStore",
    "FeedItem",
    "FeedRefusedError",
    "FileCursor",
    "decision_feed",
    "mcp_decision_feed",
]

_KINDS: Mapping[str, Literal["decision", "dead_letter"]] = {
    "attention.decision": "decision",
    "attention.dead_letter": "dead_letter",
}


class FeedRefusedError(FiduciaryError):
    """The server refused the feed (a missing or wrong key, a key without the scope), or has
    none (404)."""


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One item of the feed. ``kind``: ``decision``, ``dead_letter`` or ``cursor`` (a heartbeat:
    nothing new; its cursor is the last one). ``data``: the decision as the server wrote it
    (``attention.feed.decision_json``), empty for a cursor item; ``event_id``: the key to
    dedup on (the decision's id; None for a cursor item)."""

    kind: Literal["decision", "dead_letter", "cursor"]
    cursor: str | None
    data: Mapping[str, Any] = field(default_factory=dict)
    event_id: str | None = None


class CursorStore(Protocol):
    """Where a consumer's cursor is kept between processes."""

    def load(self) -> str | None: ...

    def save(self, cursor: str | None) -> None: ...


class FileCursor:
    """A cursor kept in a file, replaced atomically (a crash leaves the old or the new one)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> str | None:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return text or None

    def save(self, cursor: str | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(cursor or "")
                f.flush()
                os.fsync(f.fileno())
            os.replace(name, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise


class _Memory:
    def __init__(self, cursor: str | None) -> None:
        self.cursor = cursor

    def load(self) -> str | None:
        return self.cursor

    def save(self, cursor: str | None) -> None:
        self.cursor = cursor


Sleep = Callable[[float], Awaitable[None]]


async def decision_feed(
    url: str,
    *,
    api_key: str,
    cursor: CursorStore | str | None = None,
    idle_seconds: float = 30.0,
    retry_seconds: float = 0.2,
    max_retry_seconds: float = 10.0,
    client: httpx.AsyncClient | None = None,
    sleep: Sleep = asyncio.sleep,
) -> AsyncIterator[FeedItem]:
    """Follow ``url`` (a server's base URL, or the feed's own ``.../attention/decisions``),
    forever; see the module docstring. ``cursor``: a store to resume from and persist to, or
    a cursor to start after (kept in memory)."""
    kept = cursor if cursor is not None and not isinstance(cursor, str) else _Memory(cursor)
    feed = (
        url
        if url.rstrip("/").endswith("/attention/decisions")
        else (url.rstrip("/") + "/attention/decisions")
    )
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None))
    position = kept.load()
    pause = retry_seconds
    try:
        while True:
            try:
                async for item in _connection(http, feed, api_key, position, idle_seconds):
                    pause = retry_seconds
                    yield item
                    # the consumer asked for the next item: it is done with this one
                    if item.cursor != position:
                        position = item.cursor
                        kept.save(position)
            except FeedRefusedError:
                raise
            except (httpx.HTTPError, TimeoutError, _StreamEndedError):
                pass  # opened again from the cursor, after a pause
            await sleep(pause)
            pause = min(max_retry_seconds, pause * 2)
    finally:
        if own:
            await http.aclose()


class _StreamEndedError(Exception):
    """The server ended the stream (a restart, a deploy): open it again."""


async def _connection(
    http: httpx.AsyncClient, url: str, api_key: str, cursor: str | None, idle_seconds: float
) -> AsyncIterator[FeedItem]:
    headers = {"authorization": f"Bearer {api_key}", "accept": "text/event-stream"}
    if cursor is not None:
        headers["last-event-id"] = cursor
    async with http.stream("GET", url, headers=headers) as response:
        if response.status_code in (401, 403, 404):  # retrying cannot help
            await response.aread()
            what = "serves no decision feed" if response.status_code == 404 else "refused the key"
            raise FeedRefusedError(f"the server {what} ({response.status_code})")
        response.raise_for_status()
        chunks = response.aiter_text()
        buffer = ""
        while True:
            async with asyncio.timeout(idle_seconds):  # a silent stream counts as dead
                chunk = await anext(chunks, None)
            if chunk is None:
                raise _StreamEndedError
            buffer += chunk.replace("\r\n", "\n")
            *blocks, buffer = buffer.split("\n\n")
            for block in blocks:
                lines = [line for line in block.split("\n") if line]
                if lines and all(line.startswith(":") for line in lines):
                    yield FeedItem("cursor", cursor)  # a heartbeat: alive, nothing new
                    continue
                for message in parse_sse(block + "\n\n"):
                    kind = _KINDS.get(message.event)
                    if kind is None:
                        continue
                    data = json.loads(message.data)
                    cursor = message.id or cursor
                    yield FeedItem(kind, cursor, data, str(data.get("decision_id")))


async def mcp_decision_feed(
    client: Client,
    extension: McpEventsExtension,
    *,
    kind: Literal["decision", "dead_letter"] = "decision",
    cursor: CursorStore | str | None = None,
    **options: Any,
) -> AsyncIterator[FeedItem]:
    """The same items from an MCP server serving the feed (``attention.mcp_feed``): one
    subscription to ``attention.<kind>`` through ``McpEvents`` (its ``options``: mode,
    idle_seconds, ...), resuming from and persisting ``cursor`` the same way."""
    from .mcp_events import McpEvents

    kept = cursor if cursor is not None and not isinstance(cursor, str) else _Memory(cursor)
    events = McpEvents(client, extension, name=f"attention.{kind}", **options)
    position = kept.load()
    async for batch in events.batches(position):
        for incoming in batch.events:
            seq = incoming.data.get("seq")
            item_cursor = str(seq) if seq is not None else batch.cursor
            yield FeedItem(kind, item_cursor, dict(incoming.data), incoming.id)
            if item_cursor != position:
                position = item_cursor
                kept.save(position)
        if batch.cursor != position:
            yield FeedItem("cursor", batch.cursor)
            position = batch.cursor
            kept.save(position)
