"""The console shows the run's to-do list (its latest version, as a checklist) and what the model
was sent besides the conversation (context layers, compaction) in the timeline, all as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary import Agent, capability
from fiduciary.context.todos import update_todo
from fiduciary.memory import InMemoryMemory
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

HOSTILE = "<img src=x onerror=alert(1)> check <b>rent</b>"


@capability(kind="read")
async def balance() -> dict[str, str]:
    """The balance."""
    return {"USDC": "100"}


def steps() -> list[ToolCalls | Reply]:
    plan = [
        {"text": "Read the balance", "status": "in_progress"},
        {"text": HOSTILE, "status": "pending"},
    ]
    done = [
        {"text": "Read the balance", "status": "done"},
        {"text": HOSTILE, "status": "in_progress"},
    ]
    return [
        ToolCalls([Call("update_todo", {"todos": plan})]),
        ToolCalls([Call("balance", {}), Call("update_todo", {"todos": done})]),
        Reply("You have 100 USDC."),
    ]


async def test_the_checklist_and_the_context_layers_are_shown_as_text(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "todo.sqlite3")
    memory = InMemoryMemory()
    await memory.remember("advice: <script>keep</script> 50 USDC for rent", namespace="ann")
    agent = Agent(
        model=ScriptedModel([Script("plan", steps())]),
        capabilities=[balance, update_todo],
        store=store,
        authorize=allow_all,
        context="<financial_context>\nNet worth: $100.00\n</financial_context>",
        memory=memory,
    )
    keys = MemoryKeyStore()
    key, _ = await keys.create("ann", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("message").fill("plan the rent")
            await page.get_by_test_id("send").click()
            await page.get_by_test_id("assistant").filter(has_text="100 USDC").wait_for()
            lists = page.get_by_test_id("todos")
            assert await lists.count() == 1  # only the latest list
            text = await lists.inner_text()
            assert text.startswith("To do · 1 of 2 done")
            items = lists.get_by_test_id("todo")
            assert await items.all_inner_texts() == [
                "Read the balance",
                f"{HOSTILE} · in progress",
            ]
            assert await items.nth(0).locator("input").is_checked()
            assert not await items.nth(1).locator("input").is_checked()
            assert await lists.locator("img, b").count() == 0  # text, never markup
            layers = page.get_by_test_id("context-layers")
            assert "domain context · 1 recalled" in await layers.locator("summary").inner_text()
            await layers.locator("summary").click()
            recalled = await layers.get_by_test_id("recalled").all_inner_texts()
            assert recalled == ["advice: <script>keep</script> 50 USDC for rent"]
            assert "Net worth: $100.00" in await layers.inner_text()
            timeline = await page.get_by_test_id("timeline").inner_text()
            assert "todo update" in timeline
            assert "1 of 2 done" in timeline
    finally:
        await store.close()
