"""The console shows a parent waiting for its delegated run (``awaiting_child``): the badge
says so and no message can be sent; approving the child's payment on its card lets the
server drive the child, then the parent, whose view ends completed with the child's answer."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, capability
from fiduciary.capabilities import Capability
from fiduciary.delegation import child_run_id
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import (
    Call,
    Reply,
    Results,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def paying(done: list[str]) -> Capability:
    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    def pay(usd: str) -> dict[str, str]:
        """Pay an invoice."""
        done.append(usd)
        return {"paid": usd}

    return pay


def relaying(results: Results) -> str:
    return f"the worker said: {results['delegate']['text']}"


async def test_a_waiting_parent_then_its_childs_approval(tmp_path: Path) -> None:
    store, done = SQLiteStore(tmp_path / "console.sqlite3"), list[str]()
    options: dict[str, Any] = {"store": store, "authorize": allow_all}
    worker = Agent(
        model=ScriptedModel(
            [Script("invoice", [ToolCalls([Call("pay", {"usd": "5"})]), Reply("paid $5")])]
        ),
        capabilities=[paying(done)],
        **options,
    )
    task = {"agent": "billing", "task": "pay the invoice"}
    manager = Agent(
        model=ScriptedModel(
            [Script("settle", [ToolCalls([Call("delegate", task)]), Reply(relaying)])]
        ),
        capabilities=[paying([])],
        delegates={"billing": worker},
        **options,
    )
    parent = (await collect(manager.run("settle my invoice", principal="alice")))[0].run_id
    child = child_run_id(parent, "toolu_000_0")
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(manager, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.locator(f'#run-list li[data-run="{parent}"]').click()
            status = page.get_by_test_id("run-status")
            await status.get_by_text("awaiting child").wait_for()
            assert await page.get_by_test_id("send").is_disabled()
            placeholder = await page.get_by_test_id("message").get_attribute("placeholder")
            assert placeholder == "Waiting for the run it delegated to…"
            # the child's payment waits in the list of pending actions: its card
            await page.get_by_test_id("pending-item").click()
            await page.locator("#run-meta").get_by_text(f"run {child}").wait_for()
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            await card.get_by_test_id("approve").click()
            await status.get_by_text("completed").wait_for()  # the child's own run
            await page.locator("#run-meta").get_by_test_id("parent-link").click()
            await page.locator("#run-meta").get_by_text(f"run {parent}").wait_for()
            await status.get_by_text("completed").wait_for()
            assert await page.get_by_test_id("child-link").inner_text() == f"run {child}"
            conversation = page.get_by_test_id("conversation")
            await conversation.get_by_text("the worker said: paid $5").wait_for()
        assert done == ["5"]
    finally:
        await store.close()
