"""A post-execution guard's note and a refreshing read, in the web console (Chromium): the
note shows inside the write's own tool call, after its result; the read the write refreshes is
a call of its own, marked as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary import Agent, Policy, capability
from fiduciary.guards import GuardCall, GuardTier, Phase, Verdict
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all

from .served_page import signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

MESSAGE = "pay the plumber 20 USD"


@capability(kind="read")
def balance() -> dict[str, str]:
    """The balance, in USD."""
    return {"usd": "80.00"}


@capability(kind="execute", tier="auto", refresh=["balance"])
def pay(to: str, usd: str) -> dict[str, str]:
    """Pay someone, in USD."""
    return {"paid": usd, "to": to, "balance_after": "75.00"}


class PromiseGuard:
    name = "balance_promise"
    tier: GuardTier = "financial"
    phase: Phase = "post"

    def check(self, call: GuardCall) -> Verdict:
        if call.capability.name != "pay":
            return Verdict.ok()
        return Verdict.warn(
            "the balance after is 75.00, not 80.00: tell the person",
            for_person="Your balance is now 75.00 USD, not the 80.00 USD you were shown.",
        )


async def test_the_note_shows_with_the_result_and_the_refresh_is_marked(tmp_path: Path) -> None:
    script = Script(
        match=MESSAGE,
        steps=[ToolCalls([Call("pay", {"to": "plumber", "usd": "20"})]), Reply("Paid.")],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[balance, pay],
        store=SQLiteStore(tmp_path / "console.sqlite3"),
        policy=Policy(preset="balanced"),
        guards=[PromiseGuard()],
        authorize=allow_all,
    )
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(agent, keys=keys, heartbeat_seconds=5)
    async with signed_in(app, key) as shown:
        page = shown.page
        await page.get_by_test_id("message").fill(MESSAGE)
        await page.get_by_test_id("send").click()
        await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
        calls = page.get_by_test_id("tool-call")
        assert await calls.count() == 2
        paid, refreshed = calls.nth(0), calls.nth(1)
        assert "pay(" in await paid.inner_text()
        note = paid.get_by_test_id("post-guard")
        assert await note.inner_text() == (
            "balance_promise: Your balance is now 75.00 USD, not the 80.00 USD you were shown."
        )
        assert "warn" in (await note.get_attribute("class") or "")
        kind = await refreshed.locator(".kind").text_content()  # (shown in capitals)
        assert kind == "read · refreshed after the write"
        assert "balance(" in await refreshed.inner_text()
