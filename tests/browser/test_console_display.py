"""The console's card shows what the arguments hold, in a real browser: a bidi override or a
zero-width space in a recipient is shown as an escape and flagged, a word mixing Cyrillic and
Latin letters is flagged, an amount written 1.5E+2 is $150.00, and Approve without touching a
multi-line memo sends no edit (the browser's <input> used to strip its line break and send it)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, CallContext, capability
from fiduciary.events import ActionResolved
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from tests.agent_support import make_agent

from .served_page import Page, signed_in

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

RECIPIENT = "alice\u202eecila-evil\u202c\u200b"
PAYEE = "\u0430lice"  # a Cyrillic а, then Latin letters
ARGUMENTS = {"to": RECIPIENT, "payee": PAYEE, "amount": "1.5E+2", "memo": "a\nb"}


def paying_agent(store: SQLiteStore, paid: list[dict[str, Any]]) -> Agent:
    @capability(
        kind="execute",
        risk="high",
        operation="send",
        tier="confirm",
        amount_usd=lambda args, ctx: Decimal(args.amount),
        modifiable_fields=["amount", "memo"],
        describe=lambda a: f"Pay {a.amount} USD to {a.to} ({a.payee})",
    )
    async def pay(
        to: str, payee: str, amount: Decimal, memo: str = "", *, ctx: CallContext
    ) -> dict[str, str]:
        """Pay someone."""
        paid.append({"to": to, "payee": payee, "amount": amount, "memo": memo})
        return {"paid": str(amount)}

    script = Script("pay", [ToolCalls([Call("pay", ARGUMENTS)]), Reply("Paid.")])
    return make_agent(store=store, model=ScriptedModel([script]), capabilities=[pay])


@dataclass
class Console:
    page: Page
    store: SQLiteStore
    paid: list[dict[str, Any]]


@asynccontextmanager
async def card_waiting(tmp_path: Path) -> AsyncIterator[Console]:
    """A server and a browser signed in, with the payment's card shown."""
    store = SQLiteStore(tmp_path / "display.sqlite3")
    paid: list[dict[str, Any]] = []
    keys = MemoryKeyStore()
    key, _ = await keys.create("ann", ["runs:write", "runs:read", "approvals:decide"])
    app = create_app(paying_agent(store, paid), keys=keys, heartbeat_seconds=5)
    try:
        async with signed_in(app, key) as shown:
            page = shown.page
            await page.get_by_test_id("message").fill("pay")
            await page.get_by_test_id("send").click()
            await page.get_by_test_id("pending-card").wait_for()
            yield Console(page, store, paid)
    finally:
        await store.close()


async def test_the_card_shows_hidden_characters_mixed_scripts_and_amounts(tmp_path: Path) -> None:
    async with card_waiting(tmp_path) as console:
        card = console.page.get_by_test_id("pending-card")
        text = await card.inner_text()
        # nothing on the card is drawn by the browser's bidi or zero-width rules
        for hidden in ("\u202e", "\u202c", "\u200b"):
            assert hidden not in text
        args = await card.get_by_test_id("args").inner_text()
        assert '"to": "alice⟨U+202E⟩ecila-evil⟨U+202C⟩⟨U+200B⟩"' in args
        assert '"amount": "150"' in args
        assert '"memo": "a⟨U+000A⟩b"' in args
        flags = await card.get_by_test_id("flags").inner_text()
        assert "to: direction-changing characters U+202E, U+202C" in flags
        assert "to: invisible character U+200B" in flags
        assert "payee: \u0430lice mixes Cyrillic and Latin letters" in flags
        assert "amount: 1.5E+2 is a number in exponent notation" in flags
        assert "action: 1.5E+2 is 150 written in exponent notation" in flags
        assert await card.get_by_test_id("amount").inner_text() == "$150.00"
        title = await card.locator(".card-title").inner_text()
        assert title.endswith("to alice⟨U+202E⟩ecila-evil⟨U+202C⟩⟨U+200B⟩ (\u0430lice)")


async def test_approve_without_touching_a_multi_line_memo_sends_no_edit(tmp_path: Path) -> None:
    async with card_waiting(tmp_path) as console:
        page = console.page
        card = page.get_by_test_id("pending-card")
        async with page.expect_request(lambda r: r.url.endswith("/approve")) as sent:
            await card.get_by_test_id("approve").click()
        body = json.loads((await sent.value).post_data or "{}")
        assert "edits" not in body, body
        memo = card.get_by_test_id("edit-memo")  # held whole, in a textarea
        assert await memo.evaluate("node => node.tagName") == "TEXTAREA"
        assert await memo.input_value() == "a\nb"
        await page.get_by_test_id("run-status").get_by_text("completed").wait_for()
        (run,) = await console.store.list_runs()
        events = await console.store.read_events(run.run_id)
        resolved = [e for e in events if isinstance(e, ActionResolved)]
        assert [(e.decision, e.edits) for e in resolved] == [("approved", None)]
        paid = {"to": RECIPIENT, "payee": PAYEE, "amount": Decimal("150"), "memo": "a\nb"}
        assert console.paid == [paid]
