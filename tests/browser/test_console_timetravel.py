"""The console shows a replay beside the run it came from: a label in the run list, and in the
run's header a REPLAY badge with a link that opens the original."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary.demo import DEMO_MESSAGE, DEMO_PRINCIPAL, Billing, build_demo_agent
from fiduciary.observability import replay
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_a_replay_is_labelled_and_links_to_its_origin(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    agent = build_demo_agent(store, Billing())
    original = (await collect(agent.run(DEMO_MESSAGE, principal=DEMO_PRINCIPAL)))[0].run_id
    replay_id = await replay(agent, original)
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            item = page.locator(f'#run-list li[data-run="{replay_id}"]')
            await item.get_by_test_id("origin").get_by_text("replay").wait_for()
            await item.click()
            meta = page.locator("#run-meta")
            await meta.get_by_test_id("origin").get_by_text("REPLAY").wait_for()
            link = meta.get_by_test_id("origin-link")
            assert await link.inner_text() == f"run {original}"
            await link.click()
            await meta.get_by_text(f"run {original}").wait_for()
            assert await meta.get_by_test_id("origin").count() == 0  # the original is no replay
    finally:
        await store.close()
