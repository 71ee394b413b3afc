"""A server and a signed-in browser page, for the console's real-browser tests: the app served by
uvicorn on a free loopback socket, Debian's Chromium driven by Playwright, the API key typed in.

One Chromium serves every test of the session (``shared_browser``; the browser tests run on the
session's event loop, ``tests/browser/conftest.py``): its start-up took ~2 s a test. Each test
has a browser context of its own, which starts as empty as a new browser (no cookies, storage,
cache or permissions of another test's)."""

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

__all__ = [
    "ARGS",
    "CHROMIUM",
    "DESKTOP",
    "PHONE",
    "Page",
    "SignedIn",
    "chromium_or_skip",
    "close_shared_browser",
    "overflow",
    "screenshots",
    "shared_browser",
    "signed_in",
]

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
    from playwright._impl._api_structures import Clip
    from playwright.async_api import Browser, Page, Playwright, async_playwright
except ImportError:  # pragma: no cover
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)


DESKTOP = (1280, 800)
PHONE = (390, 844)  # an iPhone 14's CSS pixels


def chromium_or_skip() -> None:
    if shutil.which(CHROMIUM) or Path(CHROMIUM).exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must have Chromium at {CHROMIUM} (.ci/run installs it)")
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set FIDUCIARY_CHROMIUM)")


_browsers: dict[asyncio.AbstractEventLoop, tuple[Playwright, Browser]] = {}


async def shared_browser() -> Browser:
    """The Chromium of the running event loop, started on first use (again if it died)."""
    chromium_or_skip()
    loop = asyncio.get_running_loop()
    found = _browsers.get(loop)
    if found is not None and found[1].is_connected():
        return found[1]
    await close_shared_browser()
    pw = await async_playwright().start()
    try:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    except BaseException:
        await pw.stop()
        raise
    _browsers[loop] = (pw, browser)
    return browser


async def close_shared_browser() -> None:
    """Stop the running event loop's Chromium, if it has one (at the session's end)."""
    found = _browsers.pop(asyncio.get_running_loop(), None)
    if found is None:
        return
    pw, browser = found
    try:
        if browser.is_connected():
            await browser.close()
    finally:
        await pw.stop()


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
async def signed_in(
    app: Starlette,
    key: str,
    *,
    seconds: float = 150,
    viewport: tuple[int, int] = DESKTOP,
    timezone_id: str | None = None,
    host: str = "127.0.0.1",
) -> AsyncIterator[SignedIn]:
    """``app`` served, a browser page on its console signed in with ``key``; on leaving, the
    page must have raised no script error. ``seconds`` catches a hang, not slowness;
    ``timezone_id`` is the viewer's zone (the machine's by default), in an en-US browser;
    ``host`` names the loopback address in the page's URL (``localhost`` for WebAuthn, which
    refuses an IP address as relying party)."""
    chromium_or_skip()
    import uvicorn

    sock = _free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        with anyio.fail_after(seconds):
            browser = await shared_browser()
            width, height = viewport
            context = await browser.new_context(
                viewport={"width": width, "height": height},
                timezone_id=timezone_id,
                locale="en-US",
            )
            try:
                page = await context.new_page()
                page.set_default_timeout(20_000)
                shown = SignedIn(page)
                page.on("pageerror", lambda exc: shown.errors.append(str(exc)))
                await page.goto(f"http://{host}:{sock.getsockname()[1]}/")
                await page.get_by_test_id("api-key").fill(key)
                await page.get_by_test_id("sign-in").click()
                yield shown
                assert shown.errors == []
            finally:
                await context.close()
    finally:
        server.should_exit = True
        await serving


async def overflow(page: Page) -> list[str]:
    """What sticks out sideways: nothing when the page is no wider than its window, else the
    widest elements past the right edge (for the failure message)."""
    found: list[str] = await page.evaluate(
        """() => {
        const width = window.innerWidth;
        const name = (node) => `${node.tagName.toLowerCase()}.${node.className}`;
        const out = [];
        if (document.documentElement.scrollWidth > width) {
          out.push(`the page: ${document.documentElement.scrollWidth}px > ${width}px`);
        }
        // inside a scrolling box (the conversation) text can stick out and be cut off while
        // the page fits: so no shown element may be wider than its box either, except what
        // is cut on purpose (an ellipsis) or scrolls by nature (an input's text)
        for (const node of document.querySelectorAll("body *")) {
          const typed = ["INPUT", "TEXTAREA"].includes(node.tagName);
          if (typed || !node.getClientRects().length) continue;
          if (getComputedStyle(node).textOverflow === "ellipsis") continue;
          if (node.scrollWidth > node.clientWidth + 1 && node.clientWidth > 0) {
            out.push(`${name(node)}: ${node.scrollWidth}px of content in ${node.clientWidth}px`);
          }
        }
        return out.slice(0, 8);
    }"""
    )
    return found


async def screenshots(page: Page, folder: Path, name: str) -> dict[str, Path]:
    """The page at desktop and at phone width into ``folder``: the whole length, and on the
    phone one picture per screenful too (``name-phone-1.png`` …), as a person scrolls it. Each
    must fit its width. The window is left at desktop width."""
    shots: dict[str, Path] = {}
    for label, (width, height) in (("phone", PHONE), ("desktop", DESKTOP)):
        await page.set_viewport_size({"width": width, "height": height})
        sticking_out = await overflow(page)
        assert sticking_out == [], (label, sticking_out)
        shots[label] = folder / f"{name}-{label}.png"
        await page.screenshot(path=str(shots[label]), full_page=True)
        if label == "phone":
            length = await page.evaluate("document.documentElement.scrollHeight")
            for i, top in enumerate(range(0, length, height), start=1):
                clip: Clip = {"x": 0, "y": top, "width": width, "height": min(height, length - top)}
                shots[f"{label}-{i}"] = folder / f"{name}-{label}-{i}.png"
                await page.screenshot(path=str(shots[f"{label}-{i}"]), full_page=True, clip=clip)
    return shots
