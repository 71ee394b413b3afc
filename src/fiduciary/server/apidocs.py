"""Interactive API docs at ``/docs``: Swagger UI rendering the server's own ``/openapi.json``.

Swagger UI's files come from the ``swagger-ui-py`` package (the ``server`` extra), served by
this app under ``/docs/``: no CDN, nothing fetched from elsewhere (the validator badge is off).
The page has no inline script, under a Content-Security-Policy like the console's (Swagger UI
sets inline styles, so styles may be inline here).

No key is needed to read the docs, as for ``/openapi.json``: they describe the API and show no
one's data. "Try it out" calls the API like any client, with a key given in "Authorize" (kept
in the page's memory only, never stored).
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .problems import problem_response

__all__ = ["docs_routes", "swagger_ui_dir"]

# relative URLs: the page works wherever the app is mounted (``/docs`` -> ``/docs/...``)
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fiduciary API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/start.js"></script>
</body>
</html>
"""

_START = """"use strict";
window.ui = SwaggerUIBundle({
  url: new URL("openapi.json", document.baseURI).href,
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  persistAuthorization: false,
  displayOperationId: true,
  docExpansion: "list",
  defaultModelsExpandDepth: 0
});
"""

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; font-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
_FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}


def swagger_ui_dir() -> Path | None:
    """The folder of Swagger UI's files in the ``swagger-ui-py`` package (None: not installed).

    Found without importing the package (its ``__init__`` sets up web-framework adapters this
    server does not use)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


@cache
def _read(name: str) -> bytes | None:
    folder = swagger_ui_dir()
    return None if folder is None else (folder / name).read_bytes()


def docs_routes() -> list[Route]:
    """``GET /docs`` (the page) and ``GET /docs/{name}`` (its script, styles and start-up)."""
    return [
        Route("/docs", page, methods=["GET"], include_in_schema=False),
        Route("/docs/{name}", asset, methods=["GET"], include_in_schema=False),
    ]


def _missing() -> Response:
    return problem_response(
        "not_available",
        "the API docs need the swagger-ui-py package: pip install 'fiduciary[server]'",
    )


async def page(request: Request) -> Response:
    if swagger_ui_dir() is None:
        return _missing()
    headers = {"cache-control": "no-cache", "content-security-policy": _CSP}
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=headers)


async def asset(request: Request) -> Response:
    name = str(request.path_params["name"])
    if name == "start.js":
        return Response(_START, media_type="text/javascript; charset=utf-8")
    media = _FILES.get(name)
    if media is None:
        return problem_response("not_found", "no such file")
    content = _read(name)
    if content is None:
        return _missing()
    # the files change only with the installed package
    return Response(content, media_type=media, headers={"cache-control": "max-age=3600"})
