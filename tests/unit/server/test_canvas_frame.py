"""The page a canvas is shown in, and the console's policy for frames: the frame may load this
server's canvas page only; the page is sandboxed, reaches nothing and holds no data."""

from __future__ import annotations

import httpx
import pytest

from fiduciary.server.pages import STATIC_DIR

pytestmark = pytest.mark.timeout(30)


async def test_the_canvas_page_is_sandboxed_and_reaches_nothing(client: httpx.AsyncClient) -> None:
    page = await client.get("/canvas-frame")  # no key: it holds no one's data
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    csp = [part.strip() for part in page.headers["content-security-policy"].split(";")]
    assert csp[:2] == ["sandbox allow-scripts", "default-src 'none'"]
    assert "connect-src" not in page.headers["content-security-policy"]  # 'none', by default
    assert "form-action 'none'" in csp
    assert "allow-same-origin" not in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "SAMEORIGIN"
    assert "document.write(e.data.html)" in page.text
    assert "e.source !== parent" in page.text


async def test_the_console_frames_this_servers_canvas_page_only(client: httpx.AsyncClient) -> None:
    csp = (await client.get("/")).headers["content-security-policy"]
    assert csp.endswith("; frame-src http://test/canvas-frame")
    hostile = await client.get("/", headers={"host": "evil.example; script-src *"})
    assert "frame-src" not in hostile.headers["content-security-policy"]  # no frames at all
    assert "script-src *" not in hostile.headers["content-security-policy"]


async def test_canvas_js_is_served_and_builds_no_html(client: httpx.AsyncClient) -> None:
    script = await client.get("/static/canvas.js")
    assert script.status_code == 200
    text = (STATIC_DIR / "canvas.js").read_text(encoding="utf-8")
    assert 'sandbox: "allow-scripts",' in text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "srcdoc", "eval("):
        assert sink not in text
