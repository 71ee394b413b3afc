"""Recorded provider traffic replayed through the SDKs' own HTTP client (no network).

``Wire`` is an httpx2 mock transport answering each request with the next queued ``Reply``: a
recorded SSE stream (delivered in small chunks, so the SDK's decoder meets events split across
reads), a JSON body, an error status with headers, or a stream that drops the connection part-way.
It keeps every request it received, parsed, for assertions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

WIRE = Path(__file__).parent / "wire"


def recorded(name: str) -> bytes:
    return (WIRE / name).read_bytes()


@dataclass
class Reply:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    cut_after: int | None = None  # drop the connection after this many bytes
    chunk: int = 53

    @classmethod
    def sse(cls, name: str, **kwargs: Any) -> Reply:
        return cls(recorded(name), **kwargs)

    @classmethod
    def json(cls, value: Any, status: int = 200, **kwargs: Any) -> Reply:
        return cls(
            json.dumps(value).encode(), status=status, content_type="application/json", **kwargs
        )


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, body: bytes, chunk: int, cut_after: int | None) -> None:
        self._body = body
        self._chunk = chunk
        self._cut = cut_after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        end = len(self._body) if self._cut is None else self._cut
        for start in range(0, end, self._chunk):
            yield self._body[start : min(start + self._chunk, end)]
        if self._cut is not None:
            raise httpx2.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )


@dataclass
class Seen:
    method: str
    url: str
    headers: dict[str, str]
    body: Any


class Wire:
    """Answers requests in order from ``replies``; ``seen`` records what was asked."""

    def __init__(self, *replies: Reply | Callable[[Seen], Reply]) -> None:
        self.replies = list(replies)
        self.seen: list[Seen] = []

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        raw = request.content
        body: Any = json.loads(raw) if raw else None
        seen = Seen(request.method, str(request.url), dict(request.headers), body)
        self.seen.append(seen)
        if not self.replies:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply(seen)
        headers = {"content-type": reply.content_type, **reply.headers}
        return httpx2.Response(
            reply.status,
            headers=headers,
            stream=_Chunks(reply.body, reply.chunk, reply.cut_after),
            request=request,
        )

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    @property
    def bodies(self) -> list[Any]:
        return [s.body for s in self.seen]
