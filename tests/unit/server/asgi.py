"""An httpx transport that runs an ASGI app in-process and streams its response.

httpx's own ``ASGITransport`` collects the whole body before returning, which an endless event
stream never finishes. This one returns as soon as the response starts, streams the body as the
app sends it, and, when the client closes the response, tells the app the client disconnected
(``http.disconnect``) and waits for it to stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

import httpx
from starlette.types import ASGIApp, Message


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, chunks: asyncio.Queue[bytes | None], app: asyncio.Task[None], gone: asyncio.Event
    ) -> None:
        self._chunks = chunks
        self._app = app
        self._gone = gone

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._chunks.get()
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        self._gone.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._app), 5)
        except TimeoutError:
            self._app.cancel()
            with suppress(BaseException):
                await self._app


class StreamingASGITransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        app: ASGIApp,
        *,
        client: tuple[str, int] = ("127.0.0.1", 1234),
        max_chunks: int = 0,
    ) -> None:
        self.app = app
        self.client = client
        # with max_chunks, the app's send waits while that many chunks are unread: a slow client
        self.max_chunks = max_chunks

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "root_path": "",
            "server": (request.url.host, request.url.port or 80),
            "client": self.client,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
        }
        gone = asyncio.Event()
        sent_body = False
        started: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue(self.max_chunks)

        async def receive() -> Message:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if gone.is_set():
                raise OSError("the client disconnected")
            if message["type"] == "http.response.start":
                started.set_result(message)
            elif message["type"] == "http.response.body":
                data = bytes(message.get("body", b""))
                if data:
                    await chunks.put(data)
                if not message.get("more_body", False):
                    await chunks.put(None)

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise
            finally:
                with suppress(asyncio.QueueFull):
                    chunks.put_nowait(None)
                if not started.done():
                    started.set_exception(RuntimeError("the app sent no response"))

        task = asyncio.create_task(run())
        message = await started
        return httpx.Response(
            status_code=message["status"],
            headers=[(bytes(k), bytes(v)) for k, v in message.get("headers", [])],
            stream=_Body(chunks, task, gone),
            request=request,
        )
