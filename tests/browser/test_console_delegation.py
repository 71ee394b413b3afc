"""The console shows a delegation both ways: the parent's delegate call links to the child run
it started, and the child's header says whose delegate it is, with a link back."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, capability
from fiduciary.delegation import child_run_id
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect
from tests.agent_support import billing_manager

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@capability
def get_balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "42.00"}


async def test_a_delegation_links_parent_and_child(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    options: dict[str, Any] = {"store": store, "authorize": allow_all}
    worker = Agent(
        model=ScriptedModel([Script("balance", [Reply("it is $42.00")])]),
        capabilities=[get_balance],
        **options,
    )
    task = {"agent": "worker", "task": "look up the balance"}
    manager = Agent(
        model=ScriptedModel(
            [Script("how much", [ToolCalls([Call("delegate", task)]), Reply("done")])]
        ),
        capabilities=[get_balance],
        delegates={"worker": worker},
        **options,
    )
    parent = (await collect(manager.run("how much do I have?", principal="alice")))[0].run_id
    child = child_run_id(parent, "toolu_000_0")
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(manager, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.locator(f'#run-list li[data-run="{parent}"]').click()
            link = page.get_by_test_id("child-link")
            await link.wait_for()
            assert await link.inner_text() == f"run {child}"
            await link.click()
            meta = page.locator("#run-meta")
            await meta.get_by_text(f"run {child}").wait_for()
            assert await meta.get_by_test_id("delegated").inner_text() == "delegate worker"
            back = meta.get_by_test_id("parent-link")
            assert await back.inner_text() == f"run {parent}"
            await back.click()
            await meta.get_by_text(f"run {parent}").wait_for()
            assert await meta.get_by_test_id("delegated").count() == 0  # a person started it
    finally:
        await store.close()


async def test_a_childs_pending_action_says_whose_task_it_serves(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    options: dict[str, Any] = {"store": store, "authorize": allow_all}
    manager = billing_manager(options)
    run = manager.run("settle my invoice", principal="alice")
    await anext(run)
    waiting = asyncio.ensure_future(collect(run))  # the parent waits for its child's decision
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(manager, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            item = shown.page.get_by_test_id("pending-item")
            await item.get_by_test_id("delegated-for").wait_for()
            said = await item.get_by_test_id("delegated-for").inner_text()
            assert said == "delegated for: settle my invoice"
    finally:
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await store.close()
