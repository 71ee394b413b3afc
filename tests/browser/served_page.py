"""A server and a signed-in browser page, for the console's real-browser tests: the app served by
uvicorn on a free loopback socket, Debian's Chromium driven by Playwright, the API key typed in."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from starlette.applications import Starlette

__all__ = ["ARGS", "CHROMIUM", "Page", "SignedIn", "chromium_or_skip", "signed_in"]

CHROMIUM = os.environ.get("FIDUCIARY_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

try:
    from playwright.async_api import Page, async_playwright
except ImportError:  # pragma: no cover
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)


def chromium_or_skip() -> None:
    if shutil.which(CHROMIUM) or Path(CHROMIUM).exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must have Chromium at {CHROMIUM} (.ci/run installs it)")
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set FIDUCIARY_CHROMIUM)")


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections queue here until uvicorn accepts them
    return sock


@dataclass
class SignedIn:
    page: Page
    errors: list[str] = field(default_factory=list)  # the page's uncaught script errors


@asynccontextmanager
async def signed_in(app: Starlette, key: str, *, seconds: float = 150) -> AsyncIterator[SignedIn]:
    """``app`` served, a browser page on its console signed in with ``key``; on leaving, the
    page must have raised no script error. ``seconds`` catches a hang, not slowness."""
    chromium_or_skip()
    import uvicorn

    sock = _free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        with anyio.fail_after(seconds):
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = await browser.new_page(viewport={"width": 1440, "height": 900})
                page.set_default_timeout(20_000)
                shown = SignedIn(page)
                page.on("pageerror", lambda exc: shown.errors.append(str(exc)))
                await page.goto(f"http://127.0.0.1:{sock.getsockname()[1]}/")
                await page.get_by_test_id("api-key").fill(key)
                await page.get_by_test_id("sign-in").click()
                yield shown
                assert shown.errors == []
                await browser.close()
    finally:
        server.should_exit = True
        await serving
