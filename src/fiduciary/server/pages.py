"""What the server serves besides the API: the console, its files, the OpenAPI document and
the liveness probe. None of them needs a key (they show no one's data)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .problems import problem_response

__all__ = ["CANVAS_CSP", "STATIC_DIR", "page_routes"]

STATIC_DIR = Path(__file__).with_name("static")
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]+)?|\[[0-9A-Fa-f:.]+\](:[0-9]+)?")
# the page a canvas is shown in (static/canvas.js): sandboxed even when opened on its own, no
# origin of its own, and no request of any kind (no fetch, image, font, style sheet or form);
# inline script and style only, since the canvas is a document written into it
CANVAS_CSP = (
    "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data:; font-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'self'"
)


def page_routes(openapi: dict[str, Any]) -> list[Route]:
    """The routes of the console, its files, ``/openapi.json`` (``openapi``) and ``/healthz``."""
    return [
        Route("/", console, methods=["GET"], include_in_schema=False),
        Route("/static/{name}", static, methods=["GET"], include_in_schema=False),
        Route("/canvas-frame", canvas_frame, methods=["GET"], include_in_schema=False),
        Route("/openapi.json", _document(openapi), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]


def _document(openapi: dict[str, Any]) -> Callable[[Request], Awaitable[Response]]:
    async def openapi_document(request: Request) -> Response:
        return Response(json.dumps(openapi), media_type="application/json")

    return openapi_document


# the console's files; nothing else under static/ is served
_STATIC = frozenset(
    {
        "app.js",
        "views.js",
        "audit.js",
        "dual.js",
        "passkeys.js",
        "questions.js",
        "canvas.js",
        "tree.js",
        "style.css",
    }
)


async def healthz(request: Request) -> Response:
    return Response('{"status":"ok"}', media_type="application/json")


async def console(request: Request) -> Response:
    response = _static("index.html", "text/html; charset=utf-8", csp=True)
    response.headers["content-security-policy"] = _CSP + _canvas_frames(request)
    return response


def _canvas_frames(request: Request) -> str:
    """The console's frames may load this server's canvas page and nothing else, wherever a
    canvas tries to navigate its frame to. A Host that is not a plain host[:port] gets no
    frames at all (the canvases stay blank rather than the policy taking its text)."""
    host = request.headers.get("host", "")
    if not _HOST.fullmatch(host):
        return ""
    return f"; frame-src {request.url.scheme}://{host}/canvas-frame"


async def canvas_frame(request: Request) -> Response:
    """The empty page a canvas is written into (it holds no data, so it needs no key)."""
    headers = {
        "cache-control": "no-cache",
        "content-security-policy": CANVAS_CSP,
        "x-frame-options": "SAMEORIGIN",  # the console's frames only (Boundary's is DENY)
    }
    body = (STATIC_DIR / "canvas-frame.html").read_bytes()
    return Response(body, media_type="text/html; charset=utf-8", headers=headers)


async def static(request: Request) -> Response:
    name = str(request.path_params["name"])
    media = _STATIC_TYPES.get(Path(name).suffix)
    if media is None or name not in _STATIC:
        return problem_response("not_found", "no such file")
    return _static(name, media)


def _static(name: str, media_type: str, *, csp: bool = False) -> Response:
    headers = {"cache-control": "no-cache"}
    if csp:
        headers["content-security-policy"] = _CSP
    return Response((STATIC_DIR / name).read_bytes(), media_type=media_type, headers=headers)
