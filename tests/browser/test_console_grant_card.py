"""An app's ``request_grant`` card in the console's general pending list and approval card:
approving it there (``POST /approvals/{id}/approve``) creates the grant, and the app's message
run goes on to save within it. In a real Chromium, with the apps engine served."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary import Agent
from fiduciary.apps import MemoryAppTables
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.server.features import Features
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ScriptedModel, allow_all
from tests.faults.grant_child import build, enabled, saves
from tests.waiting import eventually

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_the_general_card_approves_a_grant_request(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    effects = tmp_path / "effects.sqlite3"
    engine = build(store, MemoryAppTables(), effects)
    try:
        await enabled(engine)
        sent = await engine.message("sweeper", "sweep the idle USDC")
        assert sent.waiting
        served = Agent(model=ScriptedModel([]), capabilities=[], store=store, authorize=allow_all)
        keys = MemoryKeyStore()
        key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
        app = create_app(served, keys=keys, heartbeat_seconds=5, features=Features(apps=engine))
        async with signed_in(app, key) as shown:
            page = shown.page
            item = page.get_by_test_id("pending-item")
            await item.wait_for()
            await item.click()  # opens the app's message run
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            assert '"operations": [' in await card.get_by_test_id("args").inner_text()
            assert saves(effects) == []
            await card.get_by_test_id("approve").click()
            outcome = page.get_by_test_id("card-outcome")
            await outcome.get_by_text("Approved by alice").wait_for()

            async def granted() -> bool:
                return len(await engine.tables.grants("sweeper")) == 1

            await eventually(granted, what="the grant created")
            # the message run goes on: its save runs within the grant, with no card of its own
            await eventually(lambda: saves(effects) == [1], what="the save ran once")
            await outcome.get_by_text("Done at").wait_for()
            assert [g.operations for g in await engine.tables.grants("sweeper")] == [("save",)]
            assert shown.errors == []
    finally:
        await store.close()
