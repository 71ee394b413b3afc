"""The console's two views beside the chat, in a real browser (Debian's Chromium via Playwright).

"Everything, live": the global stream of the signed-in principal's runs (never another's), a
new run appearing as it happens, filters by kind and by the runs' status, a run opened from it.
"Trace": the open run's waterfall — drives, model calls, capability calls with tier and
outcome, and the time an approval waited for a person. Takes the picture docs/observability.md
shows: into the test's temporary folder, or into docs/trace.png with
FIDUCIARY_UPDATE_SCREENSHOT=1 (a test run leaves the tree as it was).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary import Agent, ManualClock
from fiduciary.demo import DEMO_MESSAGE, DEMO_PRINCIPAL, Billing, build_demo_agent
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect

from .served_page import Page, screenshots, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "trace.png"


async def run_for(agent: Agent, message: str, principal: str) -> UUID:
    return (await collect(agent.run(message, principal=principal)))[0].run_id


async def rows_of(page: Page) -> list[dict[str, str]]:
    found: list[dict[str, str]] = await page.locator("[data-testid=bus-row]").evaluate_all(
        "rows => rows.map(r => ({run: r.dataset.run, type: r.dataset.type,"
        " badge: r.querySelector('[data-testid=bus-badge]').textContent,"
        " what: r.querySelector('[data-testid=bus-what]').textContent}))"
    )
    return found


async def test_everything_live_shows_only_the_callers_runs_and_filters_them(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    agent = build_demo_agent(store, Billing())
    waiting = await run_for(agent, DEMO_MESSAGE, DEMO_PRINCIPAL)  # waits for an approval
    chat = await run_for(agent, "hello", DEMO_PRINCIPAL)
    others = await run_for(agent, "hello from bob", "bob")
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("principal").get_by_text(DEMO_PRINCIPAL).wait_for()
            await page.get_by_test_id("show-everything").click()
            everything = page.get_by_test_id("everything")
            await everything.wait_for()
            assert not await page.locator("#chat").is_visible()
            rows = page.get_by_test_id("bus-row")
            waits = rows.filter(has_text="waits for your approval")
            await waits.first.wait_for()
            seen = await rows_of(page)
            assert {r["run"] for r in seen} == {str(waiting), str(chat)}  # never bob's
            assert str(others) not in {r["run"] for r in seen}
            assert {r["type"] for r in seen} == {"run_status", "tool_call", "text"}
            (waiting_row,) = [r for r in seen if "waits for your approval" in r["what"]]
            assert waiting_row["what"] == "pay_invoice $42.50 waits for your approval (confirm)"
            assert waiting_row["badge"] == "awaiting approval"
            calls = [r["what"] for r in seen if r["type"] == "tool_call"]
            assert "pay_invoice (execute)" in calls
            shots = await screenshots(page, tmp_path, "everything")  # each fits its width
            assert all(shot.stat().st_size > 0 for shot in shots.values())

            # live: a run started now appears as it happens
            count = await rows.count()
            started = asyncio.ensure_future(run_for(agent, "hello again", DEMO_PRINCIPAL))
            new = str(await started)
            await page.locator(f'[data-testid=bus-row][data-run="{new}"]').last.wait_for()
            assert await rows.count() > count

            # filters: status only, then only the runs waiting for a person
            await page.get_by_test_id("filter-text").uncheck()
            await page.get_by_test_id("filter-tool_call").uncheck()
            await page.locator(f'[data-testid=bus-row][data-run="{new}"]').last.wait_for()
            await page.wait_for_function(
                "() => [...document.querySelectorAll('[data-testid=bus-row]')]"
                ".every(r => r.dataset.type === 'run_status')"
            )
            await page.get_by_test_id("filter-status").select_option(label="waiting for you")
            await page.wait_for_function(
                "id => { const rows = [...document.querySelectorAll('[data-testid=bus-row]')];"
                " return rows.length > 0 && rows.every(r => r.dataset.run === id); }",
                arg=str(waiting),
            )
            statuses = [r["badge"] for r in await rows_of(page)]
            assert statuses == ["running", "awaiting approval"]
            await page.get_by_test_id("filter-text").check()
            await page.locator("[data-testid=bus-row][data-type=text]").first.wait_for()
            assert {r["run"] for r in await rows_of(page)} == {str(waiting)}

            # a row opens its run in the chat
            await page.get_by_test_id("bus-run").first.click()
            await page.locator("#chat").wait_for()
            await page.locator("#run-meta").get_by_text(str(waiting)).wait_for()
            assert not await everything.is_visible()
            await page.get_by_test_id("pending-card").wait_for()
    finally:
        await store.close()


class TickingClock(ManualClock):
    """Time that passes as the run works: each reading is a little later than the last."""

    def __init__(self, start: datetime, step: timedelta) -> None:
        super().__init__(start)
        self.step = step

    def now(self) -> datetime:
        self.advance(self.step)
        return super().now()


class ThinkingModel:
    """The demo's scripted model, taking (clock) time to answer, as a real one does."""

    def __init__(self, inner: object, clock: ManualClock, seconds: float) -> None:
        self.inner = inner
        self.clock = clock
        self.seconds = seconds

    @property
    def name(self) -> str:
        return "scripted"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.clock.advance(self.seconds)
        async for item in self.inner.stream(request):  # type: ignore[attr-defined]
            yield item


async def test_the_trace_of_a_run_approved_after_a_wait(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    clock = TickingClock(datetime(2026, 3, 2, 9, 30, tzinfo=UTC), timedelta(milliseconds=45))
    agent = build_demo_agent(store, Billing(), clock=clock)
    agent = agent.with_options(model=ThinkingModel(agent.model, clock, 1.4))
    run_id = await run_for(agent, DEMO_MESSAGE, DEMO_PRINCIPAL)
    clock.advance(timedelta(seconds=26))  # the person reads the card, then approves
    (pending,) = await agent.pending_approvals(principal=DEMO_PRINCIPAL)
    await agent.approve(pending.approval_id, by=DEMO_PRINCIPAL, args_digest=pending.args_digest)
    await collect(agent.resume(run_id))
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:read"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, timezone_id="UTC") as shown:
            page = shown.page
            await page.locator(f'#run-list li[data-run="{run_id}"]').click()
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            assert await page.get_by_test_id("show-trace").is_visible()
            await page.get_by_test_id("show-trace").click()
            trace = page.get_by_test_id("trace")
            await trace.get_by_test_id("span").first.wait_for()
            assert not await page.get_by_test_id("conversation").is_visible()

            spans = await trace.get_by_test_id("span").evaluate_all(
                "spans => spans.map(s => [s.dataset.kind, s.dataset.name,"
                " s.querySelector('.span-label').textContent])"
            )
            kinds = [kind for kind, _, _ in spans]
            assert kinds.count("agent") == 2  # suspended for the person, then resumed
            assert kinds.count("chat") == 3
            assert kinds.count("approval") == 1
            labels = {(name, label) for _, name, label in spans}
            assert ("execute_tool account_balance", "read · auto · ok") in labels
            assert ("execute_tool pay_invoice", "execute · confirm · pending") in labels
            assert ("execute_tool pay_invoice", "execute · confirm · ok") in labels
            assert ("await_approval pay_invoice", "$42.50 · confirm · approved") in labels
            assert ("invoke_agent fiduciary", "drive 1 · awaiting approval") in labels
            waited = trace.locator("[data-testid=span][data-kind=approval]")
            waited_for = await waited.get_by_test_id("span-time").inner_text()
            assert re.fullmatch(r"26\.\d s", waited_for), waited_for  # 26 s, and a few ticks
            # a span opens to its attributes: names, kinds, tiers, outcomes
            await waited.locator("summary").click()
            assert "fiduciary.approval.decision" in await waited.inner_text()

            await page.locator("#toggle-timeline").click()  # the waterfall gets the width
            await waited.locator("summary").click()
            shots = await screenshots(page, tmp_path, "trace")  # each fits its width
            assert all(shot.stat().st_size > 0 for shot in shots.values())
            shot = (
                DOCS_SCREENSHOT
                if os.environ.get("FIDUCIARY_UPDATE_SCREENSHOT") == "1"
                else tmp_path / "trace.png"
            )
            await page.locator("#chat").screenshot(path=str(shot))
            assert shot.stat().st_size > 0

            # back to the conversation
            await page.get_by_test_id("show-trace").click()
            await page.get_by_test_id("conversation").wait_for()
    finally:
        await store.close()
