"""The web console in a real browser (Debian's Chromium, driven by Playwright): sign in, send a
message, see the pending card, approve it, reload mid-stream, see the result without duplicate
text. Takes the screenshot the README shows: into the test's temporary folder, or into
docs/console.png with FIDUCIARY_UPDATE_SCREENSHOT=1 (a test run leaves the tree as it was)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary import Agent
from fiduciary.demo import DEMO_MESSAGE, DEMO_PRINCIPAL, Billing, build_demo_agent
from fiduciary.models.base import AssistantMessage, ModelEvent, ModelRequest, StreamTextDelta
from fiduciary.server import Balances, MemoryKeyStore, create_app
from fiduciary.server.served import ServedAgent
from fiduciary.stores.sqlite import SQLiteStore

from .served_page import Page, overflow, screenshots, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"


class HoldingModel:
    """The demo's scripted model, holding its last answer after two chunks until released."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    @property
    def name(self) -> str:
        return "scripted"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        final = sum(isinstance(m, AssistantMessage) for m in request.messages) == 2
        chunks = 0
        async for item in self.inner.stream(request):  # type: ignore[attr-defined]
            if final and isinstance(item, StreamTextDelta):
                chunks += 1
                if chunks == 3:
                    self.holding.set()
                    await self.release.wait()
            yield item


async def _conversation_text(page: Page) -> str:
    return await page.locator("[data-testid=conversation]").inner_text()


async def test_sign_in_approve_reload_mid_stream(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    billing = Billing()
    agent: Agent = build_demo_agent(store, billing)
    model = HoldingModel(agent.model)
    agent = agent.with_options(model=model)

    def balances(principal: str) -> Balances:
        dollars = billing.balance
        return Balances(balances={"USD": dollars}, usd={"USD": dollars}, total_usd=dollars)

    served = ServedAgent(agent, balances)
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(served.agent, keys=keys, balances=served.balances, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("principal").get_by_text(DEMO_PRINCIPAL).wait_for()
            usd_row = page.locator("[data-testid=balance][data-asset=USD]")
            await usd_row.get_by_test_id("held").get_by_text("120.00", exact=True).wait_for()
            assert await usd_row.get_by_test_id("worth").inner_text() == "$120.00"
            # send a message; the reads and the $4.00 payment happen, the $42.50 one waits
            await page.get_by_test_id("message").fill(DEMO_MESSAGE)
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            assert await card.get_by_test_id("amount").inner_text() == "$42.50"
            assert '"invoice_id": "inv-102"' in await card.get_by_test_id("args").inner_text()
            assert await page.get_by_test_id("tool-call").count() == 4
            await usd_row.get_by_test_id("held").get_by_text("116.00", exact=True).wait_for()
            shots = await screenshots(page, tmp_path, "card")  # each fits its width
            assert all(shot.stat().st_size > 0 for shot in shots.values())
            shot = (
                README_SCREENSHOT
                if os.environ.get("FIDUCIARY_UPDATE_SCREENSHOT") == "1"
                else tmp_path / "console.png"
            )
            await page.get_by_test_id("conversation").evaluate(
                "c => { c.scrollTop = c.scrollHeight; }"
            )
            await page.screenshot(path=str(shot))  # the README's picture: a card
            assert shot.stat().st_size > 0
            # approve it; the final answer starts streaming and is held mid-way
            await card.get_by_test_id("approve").click()
            await model.holding.wait()
            conversation = page.get_by_test_id("conversation")
            await conversation.get_by_text("Here is what I did").wait_for()
            before = await _conversation_text(page)
            assert "Your balance is now" not in before
            # reload mid-stream: the page renders what it saw and resumes after its last seq
            await page.reload()
            await conversation.get_by_text("Here is what I did").wait_for()
            model.release.set()
            await conversation.get_by_text("Your balance is now $73.50.").wait_for()
            outcome = page.get_by_test_id("card-outcome")
            await outcome.get_by_text("Done at").wait_for()
            assert (await outcome.inner_text()).startswith("Approved by demo-user at ")
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            text = await _conversation_text(page)
            assert text.count("Here is what I did") == 1
            assert text.count("inv-102: paid $42.50") == 1
            assert text.count("Your balance is now $73.50.") == 1
            assert text.count(DEMO_MESSAGE) == 1
            # the timeline: every seq in one row, in order; the answer's deltas one paragraph
            rows = page.locator("[data-testid=timeline] [data-from]")
            ranges = [
                (
                    int(await r.get_attribute("data-from") or 0),
                    int(await r.get_attribute("data-to") or 0),
                )
                for r in await rows.all()
            ]
            (run,) = await store.list_runs()
            assert [seq for a, b in ranges for seq in range(a, b + 1)] == list(
                range(1, run.last_seq + 1)
            )
            events = await store.read_events(run.run_id)
            decided = next(e.seq for e in events if e.type == "action_resolved")
            answer = [e for e in events if e.type == "text_delta" and e.seq > decided]
            paragraphs = await page.locator(
                "[data-testid=timeline] [data-testid=text]"
            ).all_inner_texts()
            assert any(
                p.startswith("Here is what I did") and p.endswith("Your balance is now $73.50.")
                for p in paragraphs
            ), paragraphs
            assert len(answer) > 1  # it came in several deltas
            await usd_row.get_by_test_id("held").get_by_text("73.50", exact=True).wait_for()
            assert await overflow(page) == []
    finally:
        await store.close()
    assert billing.balance == Decimal("73.50")
