"""The console as the person whose money it is sees it, in a real browser at desktop and phone
widths: balances rounded to what a cent is worth, with their USD values; every time in the
viewer's zone, which is shown (UTC on hover); the card says who decided and what became of the
action; the explicit tier asks for the amount on the card; the timeline is grouped into turns,
a turn's text one paragraph, its thinking folded; nothing sticks out sideways on a phone.
Screenshots go to the test's temporary folder (looked at while writing these tests)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, CallContext, capability
from fiduciary.display import show_balance, show_usd_cents
from fiduciary.models.base import ModelEvent, ModelRequest, StreamThinkingDelta, StreamThinkingDone
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.server.served import wallet_agent
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
)
from fiduciary.wallet.demo import DEMO_CONVERSATION, DEMO_PRINCIPAL, LANDLORD

from .served_page import PHONE, Page, overflow, screenshots, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCOPES = ["runs:write", "runs:read", "approvals:decide"]
TOKYO = "Asia/Tokyo"  # no daylight saving: always GMT+9 in an en-US browser
A_TIME = re.compile(r"^\d{1,2}:\d{2}:\d{2}\s[AP]M GMT\+9$")
CENTS = re.compile(r"^\$\d{1,3}(,\d{3})*\.\d{2}$")


async def send(page: Page, text: str) -> None:
    await page.get_by_test_id("message").fill(text)
    await page.get_by_test_id("send").click()


async def held(page: Page, asset: str) -> tuple[str, str]:
    row = page.locator(f"[data-testid=balance][data-asset='{asset}']")
    return await row.get_by_test_id("held").inner_text(), await row.get_by_test_id(
        "worth"
    ).inner_text()


async def times(page: Page) -> list[tuple[str, str]]:
    """Every time the page shows: its text and its hover text."""
    found: list[tuple[str, str]] = await page.locator("[data-testid=time]").evaluate_all(
        "nodes => nodes.map(n => [n.textContent, n.title])"
    )
    return found


@pytest.fixture
def no_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FIDUCIARY_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_provider")
async def test_the_wallet_console_at_desktop_and_phone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "wallet.sqlite3")
    served = wallet_agent(store)  # what `fiduciary serve` serves by default
    keys = MemoryKeyStore()
    key, _ = await keys.create(DEMO_PRINCIPAL, SCOPES)
    app = create_app(served.agent, keys=keys, balances=served.balances, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, timezone_id=TOKYO) as shown:
            page = shown.page
            await page.get_by_test_id("total-usd").wait_for()
            # amounts at the decimals a cent is worth, not 150.000000000; USD to the cent
            sui, sui_usd = await held(page, "SUI")
            assert sui == "150"
            assert CENTS.match(sui_usd), sui_usd
            assert await held(page, "USDC") == ("1,000.00", "$1,000.00")
            assert await held(page, "USDC savings") == ("1,500.00", "$1,500.00")
            eth, eth_usd = await held(page, "ETH")
            assert eth == "0.5"
            assert CENTS.match(eth_usd), eth_usd
            assert CENTS.match(await page.get_by_test_id("total-usd").inner_text())
            title = await page.locator("[data-asset=SUI] [data-testid=held]").get_attribute("title")
            assert title == "exactly 150.000000000"

            await send(page, DEMO_CONVERSATION[0])
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            await send(page, DEMO_CONVERSATION[1])
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            assert await card.get_by_test_id("amount").inner_text() == "$75.00"
            assert LANDLORD in await card.get_by_test_id("args").inner_text()
            await screenshots(page, tmp_path, "wallet-card")  # each fits its width

            await card.get_by_test_id("approve").click()
            outcome = card.get_by_test_id("card-outcome")
            await outcome.get_by_text("Done at").wait_for()
            lines = (await outcome.inner_text()).splitlines()
            assert re.fullmatch(r"Approved by demo-user at .* GMT\+9", lines[0]), lines
            assert re.fullmatch(r"Done at .* GMT\+9", lines[-1]), lines
            assert await card.get_by_test_id("approve").count() == 0  # decided: no buttons

            # every time shown is in the viewer's zone, named; its UTC time on hover
            shown_times = await times(page)
            assert len(shown_times) >= 8
            for text, hover in shown_times:
                assert A_TIME.match(text), text
                assert re.fullmatch(
                    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · shown in Asia/Tokyo", hover
                )

            # the timeline: what was said, then turns; each turn's text one paragraph
            labels = await page.locator("[data-testid=turn] .turn-label").all_inner_texts()
            assert labels[:3] == ["Run started", "You", "Turn 1"]
            assert labels.count("You") == 2
            paragraphs = await page.locator("[data-testid=timeline] [data-testid=text]").all()
            joined = [
                (
                    await p.inner_text(),
                    await p.locator("..").get_attribute("data-from"),
                    await p.locator("..").get_attribute("data-to"),
                )
                for p in paragraphs
            ]
            answer = next(t for t in joined if t[0].startswith("You had 1,000.00 USDC"))
            assert answer[0].endswith("980.00 USDC stays available.")
            assert int(answer[2] or 0) > int(answer[1] or 0)  # several deltas, one row

            # on a phone the timeline is below the chat, shown on demand, and fits too
            await page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
            assert await page.locator("#timeline-panel").is_hidden()
            await page.get_by_role("button", name="Timeline").click()
            await page.locator("#timeline-panel").wait_for()
            assert await overflow(page) == []
            await page.screenshot(path=str(tmp_path / "wallet-timeline-phone.png"), full_page=True)
    finally:
        await store.close()


class Thinking:
    """A scripted model that thinks aloud, in chunks, before its first answer."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return "scripted"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if len(request.messages) == 1:
            for chunk in ("The person asked ", "for a large payment; ", "it needs their word."):
                yield StreamThinkingDelta(chunk)
            yield StreamThinkingDone()
        async for item in self.inner.stream(request):
            yield item


LONG_ID = "acct-" + "9f8e7d6c5b4a" * 12  # no place to break a line


def explicit_agent(
    store: SQLiteStore, paid: list[dict[str, Any]], clock: ManualClock | None = None
) -> Agent:
    @capability(
        kind="execute",
        risk="high",
        operation="send",
        tier="explicit",
        amount_usd=lambda args, ctx: Decimal(args.amount),
        describe=lambda a: f"Pay {a.amount} USD to {a.to}",
    )
    async def pay(to: str, amount: Decimal, *, ctx: CallContext) -> dict[str, str]:
        """Pay someone."""
        paid.append({"to": to, "amount": amount})
        return {"paid": str(amount)}

    script = Script(
        "pay",
        [
            ToolCalls([Call("pay", {"to": LONG_ID, "amount": "1250"})], text="Paying it."),
            Reply("Paid."),
            ToolCalls([Call("pay", {"to": LONG_ID, "amount": "99.5"})]),
            Reply("Not paid, as you said."),
        ],
    )
    model = Thinking(ScriptedModel([script]))
    return Agent(model=model, capabilities=[pay], store=store, authorize=allow_all, clock=clock)


async def test_the_explicit_tier_asks_for_the_amount_on_a_phone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "explicit.sqlite3")
    paid: list[dict[str, Any]] = []
    keys = MemoryKeyStore()
    key, _ = await keys.create("ann", SCOPES)
    app = create_app(explicit_agent(store, paid), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, viewport=PHONE, timezone_id=TOKYO) as shown:
            page = shown.page
            await send(page, "pay")
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            assert await card.get_by_test_id("amount").inner_text() == "$1,250.00"
            approve = card.get_by_test_id("approve")
            confirm = card.get_by_test_id("confirm-amount")
            hint = card.get_by_test_id("confirm-hint")
            assert await approve.is_disabled()  # nothing typed yet
            await confirm.fill("1,200")
            assert await approve.is_disabled()
            assert await hint.inner_text() == "That is not $1,250.00."
            await confirm.fill("$1,250")
            assert await approve.is_enabled()
            assert await hint.inner_text() == "The amount matches."
            assert await overflow(page) == []  # the long account id wraps
            await screenshots(page, tmp_path, "explicit-card")
            await page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
            async with page.expect_request(lambda r: r.url.endswith("/approve")) as sent:
                await approve.click()
            body = json.loads((await sent.value).post_data or "{}")
            assert body["confirm_amount"] == "$1,250"
            outcome = card.get_by_test_id("card-outcome")
            await outcome.get_by_text("Done at").wait_for()
            assert (await outcome.inner_text()).startswith("Approved by ann at ")
            assert paid == [{"to": LONG_ID, "amount": Decimal("1250")}]
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()

            # the second payment is denied: the card says so, and that nothing was done
            await send(page, "and another")
            second = page.get_by_test_id("pending-card").nth(1)
            await second.wait_for()
            await second.get_by_test_id("deny").click()
            denied = second.get_by_test_id("card-outcome")
            await denied.get_by_text("Nothing was done.").wait_for()
            first_line = (await denied.inner_text()).splitlines()[0]
            assert re.fullmatch(r"Denied by ann at .* GMT\+9", first_line), first_line
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            assert len(paid) == 1

            # the thinking is one folded row, its chunks joined
            await page.get_by_role("button", name="Timeline").click()
            thinking = page.locator("[data-testid=timeline] [data-testid=thinking]")
            assert await thinking.count() == 1
            assert await thinking.get_attribute("open") is None
            summary = await thinking.locator("summary").inner_text()
            assert summary == "thinking · 58 characters"
            await thinking.locator("summary").click()
            assert await thinking.locator(".thought").inner_text() == (
                "The person asked for a large payment; it needs their word."
            )
            assert await overflow(page) == []
            await page.screenshot(path=str(tmp_path / "explicit-done-phone.png"), full_page=True)
    finally:
        await store.close()


async def test_an_expired_card_says_so_and_that_nothing_was_done(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "expired.sqlite3")
    paid: list[dict[str, Any]] = []
    clock = ManualClock(datetime.now(UTC))
    keys = MemoryKeyStore()
    key, _ = await keys.create("ann", SCOPES)
    app = create_app(explicit_agent(store, paid, clock), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, viewport=PHONE, timezone_id=TOKYO) as shown:
            page = shown.page
            await send(page, "pay")
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            clock.advance(3600)  # nobody decided in time
            await card.get_by_test_id("confirm-amount").fill("1250")
            await card.get_by_test_id("approve").click()
            outcome = card.get_by_test_id("card-outcome")
            await outcome.get_by_text("Nothing was done.").wait_for()
            lines = (await outcome.inner_text()).splitlines()
            assert re.fullmatch(r"Expired at .* GMT\+9: nobody decided in time\.", lines[0])
            expiry = await card.locator(".card-what time").inner_text()  # "expires 4:38:06 AM"
            assert lines[0].startswith(f"Expired at {expiry}:")
            assert await card.locator("p.error").inner_text() == ""  # the 410 is told above
            await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
            assert await overflow(page) == []
            await page.screenshot(path=str(tmp_path / "expired-phone.png"), full_page=True)
        assert paid == []
    finally:
        await store.close()


# (amount, its USD value or None): the console rounds as display.py does
BALANCES = [
    ("150.000000000", "525.00"),
    ("1000.000000", "1000.00"),
    ("0.50000000", "1678.96"),
    ("0.123456789", "11728.40"),
    ("149.9996", "524.99"),
    ("12345678.9", "12345678.9"),
    ("-75.5", "-75.5"),
    ("1234.5678", "0.50"),
    ("0.000000001", "0.000001"),
    ("0.0000000025", "0.00000001"),
    ("120.00", None),
    ("0.123456789", None),
    ("0", "0"),
    ("2.5E+3", "2500"),
]
USD = ["1234.565", "1234.575", "1E+3", "-12.5", "0", "-0.004", "0.015", "0.025", "999999.995"]


async def test_the_console_rounds_as_display_py_does(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "rules.sqlite3")
    keys = MemoryKeyStore()
    key, _ = await keys.create("ann", SCOPES)
    app = create_app(explicit_agent(store, []), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            rules = "window.fiduciaryDisplay"
            got = await shown.page.evaluate(
                f"([b, u]) => [b.map(([a, v]) => {rules}.balance(a, v ?? undefined)),"
                f" u.map((v) => {rules}.cents(v))]",
                [BALANCES, USD],
            )
        want = [
            [show_balance(Decimal(a), None if v is None else Decimal(v)) for a, v in BALANCES],
            [show_usd_cents(Decimal(v)) for v in USD],
        ]
        assert got == want
    finally:
        await store.close()
