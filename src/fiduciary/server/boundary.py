"""The outermost layer of the app: security headers on every response, a problem for an
unknown route or method, and a problem instead of anything that escaped (never a traceback)."""

from __future__ import annotations

from contextlib import suppress

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._logs import logger
from .problems import problem_response

__all__ = ["Boundary", "http_exception"]

log = logger("fiduciary.server")

_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class Boundary:
    """ASGI middleware: the security headers a response lacks, and ``internal_error`` for an
    exception that escaped before the response started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in _SECURITY_HEADERS if k not in names]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, guarded)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                response = problem_response("internal_error", "the server failed; it was logged")
                with suppress(Exception):
                    await response(scope, receive, guarded)


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's 404 and 405 as problems."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return problem_response("method_not_allowed", "", headers=dict(exc.headers or {}))
    return problem_response("not_found", f"no route {request.url.path[:200]}")
