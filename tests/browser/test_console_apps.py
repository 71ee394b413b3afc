"""The console's apps panel in a real browser: the apps listed with their state and tick
counters, an app that needs a person enabled by Enable → Approve, and no markup from a
manifest ever parsed as HTML; and the attention feed's decisions shown as they come."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.types import Batch, Incoming
from fiduciary.attention.watch import Attention
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.server.features import AttentionFeature, Features
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ScriptedModel

from ..unit.apps.support import Book, Hooks, engine
from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GUARDED = """---
id: guarded
name: <b>Guarded</b> buyer
hooks: [tick]
tier: standard
capabilities: [balance, buy]
permissions: [swap]
limits: {swap: 50}
---
Buy carefully.
"""
WATCH = """---
id: watch
name: Watcher
hooks: [tick]
tier: active
capabilities: [balance]
---
Watch.
"""


async def test_apps_listed_and_enabled_through_an_approval(tmp_path: Path) -> None:
    from fiduciary import Agent

    store = SQLiteStore(tmp_path / "apps.sqlite3")
    clock = ManualClock()
    eng = engine(GUARDED, WATCH, book=Book(), hooks=Hooks(), clock=clock, store=store)
    await eng.enable("watch")
    record = AttentionRecord()
    watcher = Attention(
        judge=RuleJudge(lambda judge_input: "notify"),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        clock=clock,
    )
    event = Incoming(id="p1", source="wallet", type="payment_received", at=clock.now())
    await watcher.accept("wallet", Batch(events=(event,), cursor="1"))
    features = Features(apps=eng, attention=AttentionFeature(record, watcher))
    features.closers.append(record.close)
    agent = Agent(model=ScriptedModel([]), capabilities=[], store=store, clock=clock)
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5, features=features)
    async with signed_in(app, key) as shown:
        page = shown.page
        apps = page.get_by_test_id("apps")
        guarded = apps.locator("[data-testid=app][data-app=guarded]")
        watch = apps.locator("[data-testid=app][data-app=watch]")
        await watch.get_by_test_id("app-state").get_by_text("enabled").wait_for()
        # its first slot ticks in the background (the panel refreshes every 5 s)
        ticks = watch.get_by_test_id("app-ticks")
        await ticks.get_by_text("active · ticks 1 · unchanged 0 · busy 0").wait_for()
        await watch.get_by_test_id("app-last-ticks").get_by_text("last: ran").wait_for()
        # the manifest's name is text, never markup
        await guarded.get_by_text("<b>Guarded</b> buyer").wait_for()
        assert await guarded.locator("b").count() == 0
        assert await guarded.get_by_test_id("app-state").inner_text() == "disabled"
        # enable: the app waits for a person, who approves what it will be allowed
        await guarded.get_by_test_id("app-enable").click()
        await guarded.get_by_test_id("app-state").get_by_text("waiting for approval").wait_for()
        pending = guarded.get_by_test_id("app-pending")
        await pending.get_by_text("app_enable").wait_for()
        await pending.get_by_test_id("app-approve").click()
        await guarded.get_by_test_id("app-state").get_by_text("enabled").wait_for()
        await guarded.get_by_test_id("app-disable").wait_for()
        assert (await eng.record("guarded")).enabled
        # the attention feed: the decision, its route and probabilities
        decision = page.get_by_test_id("decisions").get_by_test_id("decision")
        await decision.get_by_text("payment_received → notify → notified").wait_for()
        assert "notify 0.80" in await decision.inner_text()
    await store.close()
