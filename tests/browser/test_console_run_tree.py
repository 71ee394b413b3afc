"""The console draws a delegation's tree: the person's run lists its delegates nested (name,
status, cost), a delegated run shows its parent chain as breadcrumbs; the manager's typed
output is shown as formatted JSON, and the worker's turns say which fallback model answered.
A manager → worker → sub-worker delegation made with scripted models, in a real Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from tests.run_tree_scenario import agents, make_tree

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_the_tree_breadcrumbs_typed_output_and_fallback_model(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    try:
        tree = await make_tree(store)
        keys = MemoryKeyStore()
        key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
        app = create_app(agents(store), keys=keys, heartbeat_seconds=5, resume_on_start=False)
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.locator(f'#run-list li[data-run="{tree.manager}"]').click()
            # the manager: its typed answer, and its delegates nested two levels down
            typed = page.get_by_test_id("typed-output")
            await typed.wait_for()
            assert json.loads(await typed.inner_text()) == {
                "balance_usd": "42",
                "checked_by": "worker",
            }
            box = page.get_by_test_id("run-tree")
            sub_node = box.locator(f'[data-testid="tree-node"][data-run="{tree.sub}"]')
            await sub_node.wait_for()
            worker_node = box.locator(f'[data-testid="tree-node"][data-run="{tree.worker}"]')
            assert await worker_node.get_attribute("data-depth") == "1"
            assert await sub_node.get_attribute("data-depth") == "2"
            link = worker_node.get_by_test_id("tree-link").first
            assert await link.inner_text() == "delegate worker"
            assert await worker_node.get_by_test_id("tree-status").first.inner_text() == (
                "completed"
            )
            assert (
                "with its delegates"
                in await worker_node.get_by_test_id("tree-cost").first.inner_text()
            )
            assert (await sub_node.get_by_test_id("tree-cost").inner_text()).startswith("$0.000")
            assert await box.get_by_test_id("breadcrumbs").count() == 0  # a person started it
            # open the sub-worker from the tree: its breadcrumbs lead back up
            await sub_node.get_by_test_id("tree-link").click()
            await page.locator("#run-meta").get_by_text(f"run {tree.sub}").wait_for()
            crumbs = box.get_by_test_id("breadcrumbs")
            await crumbs.wait_for()
            said = await crumbs.inner_text()
            assert said == "how much do I have? › worker: check the balance › delegate sub"
            assert await box.get_by_test_id("run-tree-children").count() == 0
            # up one: the worker, whose turns a fallback model answered
            await crumbs.get_by_test_id("breadcrumb").nth(1).click()
            await page.locator("#run-meta").get_by_text(f"run {tree.worker}").wait_for()
            answered = page.get_by_test_id("answered-by")
            await answered.first.wait_for()
            assert await answered.all_inner_texts() == ["answered by backup-model"] * 2
            assert await page.get_by_test_id("typed-output").count() == 0  # no typed output
            assert shown.errors == []
    finally:
        await store.close()
