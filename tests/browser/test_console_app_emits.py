"""The console's app panel shows the apps' live channels in a real browser: an emit arrives as it
happens (``GET /events?type=app_emit``), shown as text — markup in an emit is never parsed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fiduciary import Agent, ManualClock
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.server.features import Features
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ScriptedModel

from ..unit.apps.support import Book, Hooks, engine
from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WATCH = """---
id: watch
name: Watcher
hooks: [tick]
tier: active
capabilities: [balance]
---
Watch, and say what you see.
"""
HOSTILE = '<img src=x onerror="window.pwned=1">'


async def test_an_apps_emit_is_shown_live_in_the_apps_panel(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "apps.sqlite3")
    hooks = Hooks()
    hooks.on(
        "watch",
        "tick",
        lambda ctx: {"emit": {"channel": "price", "data": {"sui": "1.25", "note": HOSTILE}}},
    )
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=ManualClock(), store=store)
    agent = Agent(model=ScriptedModel([]), capabilities=[], store=store, clock=eng.clock)
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    # no background steps: the test ticks once the page listens
    app = create_app(
        agent, keys=keys, heartbeat_seconds=5, features=Features(apps=eng, tick_seconds=3600)
    )
    async with signed_in(app, key) as shown:
        page = shown.page
        await page.get_by_test_id("apps").locator("[data-app=watch]").wait_for()
        async with asyncio.timeout(30):  # the panel's live feed is open (the server listens)
            while eng.channels.listener_count < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # a condition polled: the page gives no signal
        await eng.enable("watch")
        assert (await eng.tick("watch")).outcome == "ran"
        row = page.locator("[data-testid=app-emit][data-app=watch][data-channel=price]")
        await row.wait_for()
        text = await row.inner_text()
        assert "watch · price" in text
        assert '"sui":"1.25"' in text
        assert "<img src=x onerror=" in text  # shown as text (its quotes JSON-escaped)
        assert await page.locator("#apps-panel img").count() == 0
        assert await page.evaluate("window.pwned") is None
