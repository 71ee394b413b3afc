"""Cards in the web console (Chromium): a swap's quote age and "New quote", which replaces
the card with one carrying a fresh quote; a call of two steps listed on one card, each step's
outcome beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from fiduciary import Policy
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.wallet import PaperWallet, build_wallet_agent
from tests.unit.wallet.test_regenerate import swap_script

from .served_page import Page, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@asynccontextmanager
async def _console(tmp_path: Path, script: Script) -> AsyncIterator[Page]:
    """The console signed in as alice, over a paper wallet agent whose model follows
    ``script`` under the conservative policy."""
    with PaperWallet() as wallet:
        agent = build_wallet_agent(
            SQLiteStore(tmp_path / "console.sqlite3"),
            wallet,
            model=ScriptedModel([script]),
            policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        )
        keys = MemoryKeyStore()
        key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
        app = create_app(agent, keys=keys, heartbeat_seconds=5)
        async with signed_in(app, key) as shown:
            yield shown.page


async def test_new_quote_replaces_the_card(tmp_path: Path) -> None:
    async with _console(tmp_path, swap_script()) as page:
        await page.get_by_test_id("message").fill("swap 500 USDC for SUI")
        await page.get_by_test_id("send").click()
        cards = page.get_by_test_id("pending-card")
        await cards.first.wait_for()
        first = cards.nth(0)
        age = first.get_by_test_id("quote-age")
        await age.get_by_text("quoted").wait_for()
        assert (await age.inner_text()).endswith("s ago")
        old_args = await first.get_by_test_id("args").inner_text()
        await first.get_by_test_id("regenerate").click()
        await first.get_by_text("by a new card with a fresh quote").wait_for()
        await cards.nth(1).wait_for()
        second = cards.nth(1)
        assert await second.get_by_test_id("regenerate").count() == 1
        new_args = await second.get_by_test_id("args").inner_text()
        assert new_args != old_args  # a fresh quote_id
        assert await first.get_by_test_id("regenerate").count() == 0  # decided: no buttons


async def test_a_call_of_two_steps_shows_them_on_one_card_and_each_outcome(
    tmp_path: Path,
) -> None:
    script = Script(
        "swap and save",
        [
            ToolCalls([Call("balance_check")]),
            ToolCalls([Call("swap_and_save", {"from_asset": "SUI", "amount": "100"})]),
            Reply("Swapped and saved."),
        ],
    )
    async with _console(tmp_path, script) as page:
        await page.get_by_test_id("message").fill("swap and save 100 SUI")
        await page.get_by_test_id("send").click()
        card = page.get_by_test_id("pending-card")
        await card.wait_for()
        steps = card.get_by_test_id("card-step")
        assert await steps.count() == 2
        assert "Swap 100 SUI for USDC" in await steps.nth(0).inner_text()
        assert "Save the USDC" in await steps.nth(1).inner_text()
        amount = card.get_by_test_id("confirm-amount")
        if await amount.is_visible():  # explicit: the amount re-typed
            typed = (await card.get_by_test_id("amount").inner_text()).replace("$", "")
            await amount.fill(typed.replace(",", ""))
        await card.get_by_test_id("approve").click()
        await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
        statuses = card.get_by_test_id("step-status")
        await statuses.nth(1).get_by_text("done").wait_for()
        assert "done" in await statuses.nth(0).inner_text()
