"""``fiduciary.mcp.origins``: which browser origins may use /mcp, and the address a request
reached (where console links point)."""

from __future__ import annotations

from typing import Any

import pytest

from fiduciary.mcp.origins import Origins, origin_of, served_url


def scope(host: str | None, origin: str | None = None, **more: Any) -> dict[str, Any]:
    headers = [] if host is None else [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "http", "scheme": "http", "headers": headers, **more}


@pytest.mark.parametrize(
    ("host", "origin", "allowed"),
    [
        ("127.0.0.1:8000", None, True),
        ("127.0.0.1:8000", "http://127.0.0.1:8000", True),
        ("localhost:8000", "http://localhost:8000", True),
        ("[::1]:8000", "http://[::1]:8000", True),
        ("[::1]", "http://[::1]", True),
        ("127.0.0.1:8000", "http://127.0.0.1:8001", False),  # another local server's page
        ("127.0.0.1:8000", "https://127.0.0.1:8000", False),  # another scheme
        ("evil.example.com", "http://evil.example.com", False),  # rebound: not loopback
        ("fid.example.com", "http://fid.example.com", False),  # needs --public-url
    ],
)
def test_a_requests_own_origin_is_allowed_only_on_a_loopback_name(
    host: str, origin: str | None, allowed: bool
) -> None:
    assert Origins().allows(scope(host, origin)) is allowed


def test_an_origin_must_be_an_http_origin() -> None:
    assert origin_of("https://Fid.Example.com/base/") == "https://fid.example.com"
    for bad in ("evil", "ftp://x.example.com", "https://user@x.example.com", "https://"):
        with pytest.raises(ValueError, match="is not an http"):
            origin_of(bad)


def test_the_served_address_is_the_host_asked_for_else_the_socket() -> None:
    assert served_url(scope("127.0.0.1:18741")) == "http://127.0.0.1:18741/"
    assert served_url(scope("h.example:80", root_path="/fid/")) == "http://h.example:80/fid/"
    weird = scope("x.example/<script>", server=("127.0.0.1", 18741))
    assert served_url(weird) == "http://127.0.0.1:18741/"
    assert served_url(scope(None, server=("::1", 9))) == "http://[::1]:9/"
