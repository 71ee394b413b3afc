"""Passkeys and dual control in the console, in a real browser (Chromium, a virtual
authenticator): a passkey registered from the "Passkeys" panel signs an approval's card and is
revoked there; an approval that needs 2 of a group shows "1 of 2 approved (bob, …)" to the
second approver, who cannot open the proposer's run, and its vote lets the action run once.

The walk-through's pictures (docs/approvals.md) are taken here at desktop and phone width;
``FIDUCIARY_UPDATE_SCREENSHOT=1`` writes them into docs/ (a test run leaves the tree as it was).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import pytest

from fiduciary import Agent, Policy
from fiduciary.dual_control import DualControl
from fiduciary.passkeys import PasskeyRegistry, Passkeys, check_origins, verify_run
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.signed_approvals import SignatureRule
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from tests.agent_support import Effects, make_agent
from tests.waiting import eventually

from .served_page import DESKTOP, PHONE, Page, overflow, signed_in
from .test_console_passkeys import authenticator

if TYPE_CHECKING:
    from playwright.async_api import Locator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITES = ["runs:write", "runs:read", "approvals:decide"]


def model() -> ScriptedModel:
    return ScriptedModel(
        [Script("send 60", [ToolCalls([Call("send", {"to": "x", "amount": "60"})]), Reply("ok")])]
    )


async def pictures(page: Page, card: Locator, tmp_path: Path, name: str) -> None:
    """The page at desktop and phone width with ``card`` in view, each fitting its width: into
    docs/ when asked."""
    update = os.environ.get("FIDUCIARY_UPDATE_SCREENSHOT") == "1"
    for label, (width, height) in (("phone", PHONE), ("desktop", DESKTOP)):
        await page.set_viewport_size({"width": width, "height": height})
        assert await overflow(page) == [], label
        await card.scroll_into_view_if_needed()
        shot = (DOCS if update else tmp_path) / f"{name}-{label}.png"
        await page.screenshot(path=str(shot))
        assert shot.stat().st_size > 0


async def test_register_from_the_panel_then_approve_a_signed_card(tmp_path: Path) -> None:
    effects = Effects()
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    registry = PasskeyRegistry(tmp_path / "passkeys.sqlite3")
    rule = SignatureRule(at_or_above_usd=Decimal(50))
    agent = make_agent(effects, store, model=model(), policy=Policy(signatures=rule))
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", WRITES)
    # the page's origin is known once it is served: the relying party learns it then
    passkeys = Passkeys(registry, rp_id="localhost", origins=["http://localhost"])
    app = create_app(agent.with_options(signatures=passkeys), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key, host="localhost") as shown:
            page = shown.page
            origin = "http://" + urlsplit(page.url).netloc
            passkeys.origins = check_origins("localhost", [origin])
            await page.reload()  # signed in again from this tab: now the panel has passkeys
            await authenticator(page)
            panel = page.get_by_test_id("passkeys-panel")
            await panel.get_by_text("None yet").wait_for()
            await panel.get_by_test_id("passkey-name").fill("my laptop")
            await panel.get_by_test_id("passkey-register").click()
            made = panel.get_by_test_id("passkey")
            await made.get_by_text("my laptop").wait_for()
            assert "never used" in await made.inner_text()
            assert [c.name for c in registry.of("alice")] == ["my laptop"]

            await page.get_by_test_id("message").fill("send 60")
            await page.get_by_test_id("send").click()
            card = page.get_by_test_id("pending-card")
            await card.wait_for()
            await card.get_by_test_id("signing-note").wait_for()  # said before Approve
            await pictures(page, card, tmp_path, "approval-signing")
            await card.get_by_test_id("approve").click()
            await page.get_by_test_id("conversation").get_by_text("ok").last.wait_for()
            assert len(effects.payments) == 1
            (run,) = await store.list_runs()
            (verdict,) = verify_run(registry, run.run_id)
            assert verdict.valid, verdict.reason
            assert verdict.approver == "alice"

            page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            await made.get_by_test_id("passkey-revoke").click()
            await panel.locator("li.revoked").get_by_text("my laptop").wait_for()
            assert await made.get_by_test_id("passkey-revoke").count() == 0
            (revoked,) = registry.of("alice")
            assert revoked.revoked_at is not None
    finally:
        registry.close()
        await store.close()


def dual_agent(tmp_path: Path, effects: Effects) -> tuple[Agent, SQLiteStore]:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    finance = DualControl(
        "finance", frozenset({"alice", "bob", "carol"}), required=2, at_or_above_usd=Decimal(50)
    )
    agent = make_agent(effects, store, model=model(), policy=Policy(dual_control=[finance]))
    return agent, store


async def vote(client: httpx.AsyncClient, key: str, edits: dict[str, str] | None = None) -> None:
    """``key``'s principal approves the one pending approval (with ``edits``), once it waits."""
    waiting: list[dict[str, str]] = []

    async def pending() -> bool:
        got = await client.get("/approvals", headers={"authorization": f"Bearer {key}"})
        waiting[:] = got.json()["approvals"]
        return bool(waiting)

    await eventually(pending, what="an approval waiting for a vote")  # in tables: nothing to await
    (approval,) = waiting
    body: dict[str, object] = {"args_digest": approval["args_digest"]}
    if edits:
        body["edits"] = edits
    voted = await client.post(
        f"/approvals/{approval['approval_id']}/approve",
        json=body,
        headers={"authorization": f"Bearer {key}"},
    )
    assert voted.status_code == 200, voted.text
    assert voted.json()["status"] == "pending"


@asynccontextmanager
async def dave_proposed(
    tmp_path: Path, effects: Effects, *approvers: str
) -> AsyncIterator[tuple[Page, httpx.AsyncClient, dict[str, str]]]:
    """Carol's console on a dual-control agent where dave started ``send 60`` (over HTTP):
    her page, a client of the same server, and an API key for dave, carol and each of
    ``approvers``."""
    agent, store = dual_agent(tmp_path, effects)
    keys = MemoryKeyStore()
    made = {name: (await keys.create(name, WRITES))[0] for name in ("dave", *approvers, "carol")}
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, made["carol"]) as shown:
            page = shown.page
            base = "http://" + urlsplit(page.url).netloc
            async with httpx.AsyncClient(base_url=base) as client:
                started = await client.post(
                    "/runs",
                    json={"message": "send 60"},
                    headers={"authorization": f"Bearer {made['dave']}"},
                )
                assert started.status_code == 202, started.text
                yield page, client, made
    finally:
        await store.close()


async def test_a_one_of_two_card_is_shown_to_the_second_approver(tmp_path: Path) -> None:
    effects = Effects()
    async with dave_proposed(tmp_path, effects, "bob") as (page, client, keys):
        await vote(client, keys["bob"])

        # carol's list has dave's approval; its card opens here, though the run cannot
        item = page.get_by_test_id("pending-item")
        await item.wait_for()
        await item.click()
        card = page.get_by_test_id("vote-card")
        progress = card.get_by_test_id("dual-progress")
        await progress.get_by_text("1 of 2 approved (bob, ").wait_for()
        assert "finance" in await progress.inner_text()
        assert "edit" not in await progress.inner_text()
        assert await card.get_by_test_id("signing-note").count() == 0  # no rule here
        assert effects.payments == []
        await pictures(page, card, tmp_path, "approval-dual")

        await card.get_by_test_id("approve").click()
        await card.get_by_test_id("vote-outcome").get_by_text("approved").wait_for()

        await eventually(lambda: len(effects.payments) == 1, what="the payment")


async def test_the_card_says_an_edit_started_a_new_set(tmp_path: Path) -> None:
    effects = Effects()
    async with dave_proposed(tmp_path, effects, "bob", "alice") as (page, client, keys):
        await vote(client, keys["bob"])
        await vote(client, keys["alice"], {"amount": "61"})  # bob approved other arguments

        item = page.get_by_test_id("pending-item")
        await item.wait_for()
        await item.click()
        card = page.get_by_test_id("vote-card")
        progress = card.get_by_test_id("dual-progress")
        await progress.get_by_text("1 of 2 approved (alice, ").wait_for()
        assert "an edit started a new approval set" in await progress.inner_text()
        assert effects.payments == []
