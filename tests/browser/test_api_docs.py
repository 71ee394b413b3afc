"""The interactive API docs at /docs in a real browser (Debian's Chromium, driven by Playwright):
every operation of the OpenAPI document is rendered, nothing is fetched from another origin,
the page's Content-Security-Policy holds, and "Try it out" calls the API with a key given in
"Authorize"."""

from __future__ import annotations

import asyncio
import socket

import anyio
import pytest

from fiduciary.demo import DEMO_PRINCIPAL, Billing, build_demo_agent
from fiduciary.server import OPERATIONS, MemoryKeyStore, create_app
from fiduciary.stores.memory import MemoryStore

from .served_page import chromium_or_skip, shared_browser

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_docs_render_every_operation_from_the_package_and_try_one_with_a_key() -> None:
    chromium_or_skip()  # (importing served_page skipped the test without playwright)
    import uvicorn

    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:read"])
    app = create_app(build_demo_agent(MemoryStore(), Billing()), keys=keys, resume_on_start=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    requested: list[str] = []
    problems: list[str] = []  # script errors, console errors (a CSP refusal is one)
    try:
        with anyio.fail_after(150):
            context = await (await shared_browser()).new_context(
                viewport={"width": 1280, "height": 900}
            )
            try:
                page = await context.new_page()
                page.set_default_timeout(20_000)
                page.on("request", lambda r: requested.append(r.url))
                page.on("pageerror", lambda exc: problems.append(str(exc)))
                page.on(
                    "console",
                    lambda m: problems.append(m.text) if m.type == "error" else None,
                )
                await page.goto(f"{base}/docs")
                operations = page.locator(".opblock")
                await operations.first.wait_for()
                await page.wait_for_function(
                    f"document.querySelectorAll('.opblock').length >= {len(OPERATIONS)}"
                )
                assert await operations.count() == len(OPERATIONS)
                shown = {
                    " ".join(text.split())
                    for text in await page.locator(".opblock-summary-path").all_inner_texts()
                }
                assert shown == {op.path for op in OPERATIONS}
                ids = set(await page.locator(".opblock-summary-operation-id").all_inner_texts())
                assert ids == {op.operation_id for op in OPERATIONS}
                # "Authorize" with a key, then "Try it out" on GET /me
                await page.locator(".btn.authorize").click()
                await page.locator(".auth-container input").fill(key)
                await page.locator(".auth-btn-wrapper .btn.modal-btn.authorize").click()
                await page.locator(".btn-done").click()
                me = page.locator("#operations-auth-whoAmI")
                await me.locator(".opblock-summary").click()
                await me.locator(".try-out__btn").click()
                await me.locator(".execute").click()
                body = me.locator(".live-responses-table .response-col_description pre")
                await body.first.wait_for()
                assert f'"principal": "{DEMO_PRINCIPAL}"' in await body.first.inner_text()
            finally:
                await context.close()
    finally:
        server.should_exit = True
        await serving
    assert problems == []
    assert requested
    assert all(url.startswith(base + "/") for url in requested), requested  # no CDN
    assert f"{base}/openapi.json" in requested
    assert f"{base}/me" in requested
