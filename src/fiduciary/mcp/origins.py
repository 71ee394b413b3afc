"""Which browser origins may reach the MCP endpoint, and the address a request was served at.

The MCP transport requires a server to validate ``Origin`` (a web page must not drive a local
server through DNS rebinding). ``Origins`` allows a request when it has no ``Origin`` (a
non-browser client), when its origin is one configured (exactly, or ``scheme://host:*`` for any
port, as the SDK's transport security settings spell it), the public URL's, or the request's own
origin on a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``: a page the server serves
itself; a rebound name such as ``evil.example.com`` is never loopback). Anything else is
refused with 403 before the API key is looked at.

``served_url``: the address a request reached (scheme, ``Host``, root path), where links to the
console point unless a public URL is configured (behind a proxy).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Origins", "forbidden_origin", "origin_of", "served_url"]

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]"})
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (lower case, no path); else a ``ValueError``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        raise ValueError(f"{url!r} is not an http(s) origin (scheme://host[:port])")
    return f"{parts.scheme}://{parts.netloc}".lower()


def _header(scope: Any, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def served_url(scope: Any) -> str:
    """Where this request reached the server: ``scheme://host[:port]{root_path}/``."""
    host = _header(scope, b"host")
    if host is None or not _HOST.match(host):
        server = scope.get("server") or ("127.0.0.1", 80)
        name = f"[{server[0]}]" if ":" in str(server[0]) else str(server[0])
        host = f"{name}:{server[1]}"
    root = str(scope.get("root_path", "")).rstrip("/")
    return f"{scope.get('scheme', 'http')}://{host}{root}/"


class Origins:
    """The origins allowed besides a request's own on a loopback name (see the module)."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        exact: set[str] = set()
        ports: set[str] = set()
        for entry in allowed:
            if entry.rstrip().endswith(":*"):
                ports.add(origin_of(entry.rstrip()[:-2]))
            else:
                exact.add(origin_of(entry))
        self.exact = frozenset(exact)
        self.any_port = frozenset(ports)

    def allows(self, scope: Any) -> bool:
        origin = _header(scope, b"origin")
        if origin is None:
            return True  # not a browser: nothing to rebind
        given = origin.strip().lower()
        if given in self.exact:
            return True
        base, _, port = given.rpartition(":")
        if port.isdigit() and base in self.any_port:
            return True
        host = (_header(scope, b"host") or "").lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        own = f"{scope.get('scheme', 'http')}://{host}"
        return name in _LOOPBACK and given == own


async def forbidden_origin(send: Any) -> None:
    """403, as a problem document."""
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "forbidden_origin",
            "status": 403,
            "detail": "this Origin may not use the MCP endpoint (fiduciary serve --allow-origin)",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"application/problem+json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
