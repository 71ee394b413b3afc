"""The console's audit view in a real browser (Debian's Chromium via Playwright): the signed-in
principal's decisions and ledger rows (never another principal's), filtered, a row's run opened
in the chat, the page fitting a phone and a desktop; an admin key reads everyone's rows, or one
principal's."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from fiduciary import Agent
from fiduciary.demo import DEMO_MESSAGE, DEMO_PRINCIPAL, Billing, build_demo_agent
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.base import RecordQuery
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import approve_all, collect

from .served_page import Page, screenshots, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def run_for(agent: Agent, message: str, principal: str) -> UUID:
    return (await collect(agent.run(message, principal=principal)))[0].run_id


async def rows_of(page: Page, testid: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = await page.locator(f"[data-testid={testid}]").evaluate_all(
        "rows => rows.map(r => ({run: r.dataset.run, capability: r.dataset.capability,"
        " outcome: r.dataset.outcome || r.dataset.status, text: r.textContent}))"
    )
    return found


async def test_the_audit_view_shows_the_callers_decisions_and_ledger(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "console.sqlite3")
    agent = build_demo_agent(store, Billing())
    paid = await run_for(agent, DEMO_MESSAGE, DEMO_PRINCIPAL)  # the $42.50 bill waits
    await approve_all(agent, paid, by=DEMO_PRINCIPAL)
    others = await run_for(agent, DEMO_MESSAGE, "bob")  # refused: not authorized
    bobs = await store.find_audit(RecordQuery(run_id=others))
    assert {r.principal for r in bobs} == {"bob"}  # rows the view must never show
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, ["runs:write", "runs:read", "approvals:decide"])
    admin, _ = await keys.create("ops", ["admin"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("principal").get_by_text(DEMO_PRINCIPAL).wait_for()
            await page.get_by_test_id("show-audit").click()
            await page.get_by_test_id("audit").wait_for()
            assert not await page.locator("#chat").is_visible()
            await page.get_by_test_id("audit-row").first.wait_for()
            seen = await rows_of(page, "audit-row")
            assert {r["run"] for r in seen} == {str(paid)}  # never bob's
            outcomes = [(r["capability"], r["outcome"]) for r in seen]
            assert outcomes.count(("pay_invoice", "ok")) == 2
            assert ("pay_invoice", "pending") in outcomes
            assert ("list_invoices", "ok") in outcomes
            (waited,) = [r for r in seen if r["outcome"] == "pending"]
            assert "$42.50" in waited["text"]
            assert "confirm" in waited["text"]
            shots = await screenshots(page, tmp_path, "audit")  # each fits its width
            assert all(shot.stat().st_size > 0 for shot in shots.values())

            # the ledger: the two payments, done
            await page.get_by_test_id("audit-show").select_option("ledger")
            await page.get_by_test_id("ledger-row").first.wait_for()
            ledger = await rows_of(page, "ledger-row")
            assert [(r["run"], r["capability"], r["outcome"]) for r in ledger] == [
                (str(paid), "pay_invoice", "done"),
                (str(paid), "pay_invoice", "done"),
            ]
            assert any('"invoice_id":"inv-102"' in r["text"] for r in ledger)

            # filters: a capability with no rows, a run id that is not one
            await page.get_by_test_id("audit-show").select_option("audit")
            await page.get_by_test_id("audit-capability").fill("list_invoices")
            await page.get_by_test_id("audit-refresh").click()
            await page.wait_for_function(
                "() => { const rows = [...document.querySelectorAll('[data-testid=audit-row]')];"
                " return rows.length > 0 && rows.every(r => r.dataset.capability === "
                "'list_invoices'); }"
            )
            await page.get_by_test_id("audit-capability").fill("no_such_capability")
            await page.get_by_test_id("audit-refresh").click()
            await (
                page.get_by_test_id("audit-table")
                .get_by_text("Nothing recorded matches.")
                .wait_for()
            )
            await page.get_by_test_id("audit-capability").fill("")
            await page.get_by_test_id("audit-run").fill("1234")
            await page.get_by_test_id("audit-refresh").click()
            await (
                page.get_by_test_id("audit-error")
                .get_by_text("A run id has 36 characters")
                .wait_for()
            )
            await page.get_by_test_id("audit-run").fill(str(paid))
            await page.get_by_test_id("audit-refresh").click()
            await page.get_by_test_id("audit-row").first.wait_for()
            assert await page.get_by_test_id("audit-error").text_content() == ""

            assert not await page.get_by_test_id("audit-principal").is_visible()

            # a row opens its run in the chat
            await page.locator(".audit-run").first.click()
            await page.locator("#chat").wait_for()
            await page.locator("#run-meta").get_by_text(str(paid)).wait_for()
            assert not await page.get_by_test_id("audit").is_visible()

            # an admin key reads everyone's rows, or one principal's
            await page.locator("#sign-out").click()
            await page.get_by_test_id("api-key").fill(admin)
            await page.get_by_test_id("sign-in").click()
            await page.get_by_test_id("principal").get_by_text("ops").wait_for()
            await page.get_by_test_id("show-audit").click()
            await page.get_by_test_id("audit-principal").wait_for()
            await page.wait_for_function(
                "runs => { const seen = new Set([...document.querySelectorAll("
                "'[data-testid=audit-row]')].map(r => r.dataset.run));"
                " return runs.every(r => seen.has(r)); }",
                arg=[str(paid), str(others)],
            )
            await page.get_by_test_id("audit-principal").fill("bob")
            await page.get_by_test_id("audit-refresh").click()
            await page.wait_for_function(
                "run => { const rows = [...document.querySelectorAll('[data-testid=audit-row]')];"
                " return rows.length > 0 && rows.every(r => r.dataset.run === run); }",
                arg=str(others),
            )
    finally:
        await store.close()
