"""Payment links and invoices on the paper wallet: created and cancelled through runs (writes a
person confirms, on the card), paid by a simulated payer in another process, and the books."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import ManualClock, SQLiteStore
from fiduciary.agent import Agent
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, WalletError, build_wallet_agent
from fiduciary.wallet.invoicing import PAYMENT_READS, PAYMENT_WRITES, payment_capabilities
from fiduciary.wallet.receivables import LineItem, Receivables

from .conftest import available, tx_count

PAYER = "0x" + "cd" * 20


def books(wallet: PaperWallet) -> Receivables:
    return Receivables(wallet.ledger)


# --- the books ----------------------------------------------------------------------------------


def test_a_paid_link_credits_the_principal_once(wallet: PaperWallet, clock: ManualClock) -> None:
    wallet.open("ann")
    before = available(wallet, "ann", "USDC")
    link = books(wallet).create(
        "ann", "link", "usdc", amount=Decimal("12.5"), memo="lunch", key="k1", at=clock.now()
    )
    assert (link.status, link.asset, link.amount) == ("open", "USDC", Decimal("12.5"))
    assert link.reference.startswith("pl_")
    again = books(wallet).create(
        "ann", "link", "usdc", amount=Decimal("12.5"), memo="lunch", key="k1", at=clock.now()
    )
    assert again.reference == link.reference  # a replayed call finds what it made

    paid = books(wallet).pay(link.reference, payer=PAYER, at=clock.now())
    assert (paid.status, paid.paid_by) == ("paid", PAYER)
    assert available(wallet, "ann", "USDC") == before + Decimal("12.5")
    posted = tx_count(wallet)
    with pytest.raises(WalletError) as refused:
        books(wallet).pay(link.reference, payer=PAYER, at=clock.now())
    assert refused.value.code == "already_paid"
    with pytest.raises(WalletError) as refused:
        books(wallet).cancel("ann", "link", link.reference, at=clock.now())
    assert refused.value.code == "already_paid"
    assert tx_count(wallet) == posted
    assert available(wallet, "ann", "USDC") == before + Decimal("12.5")
    assert wallet.verify().ok
    entry = wallet.history("ann", limit=1)[0]
    assert link.reference in entry.label


def test_a_wrong_payment_or_a_cancelled_reference_posts_nothing(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open("ann")
    link = books(wallet).create("ann", "link", "USDC", amount=Decimal(5), key="k", at=clock.now())
    posted = tx_count(wallet)
    for kwargs, code in (
        ({"amount": Decimal("4.99")}, "amount_mismatch"),
        ({"asset": "SUI"}, "asset_mismatch"),
    ):
        with pytest.raises(WalletError) as refused:
            books(wallet).pay(link.reference, payer=PAYER, at=clock.now(), **kwargs)
        assert refused.value.code == code
    cancelled = books(wallet).cancel("ann", "link", link.reference, at=clock.now())
    assert cancelled.status == "cancelled"
    with pytest.raises(WalletError) as refused:
        books(wallet).pay(link.reference, payer=PAYER, at=clock.now())
    assert refused.value.code == "already_cancelled"
    with pytest.raises(WalletError) as refused:
        books(wallet).cancel("bob", "link", link.reference, at=clock.now())
    assert refused.value.code == "not_found"  # another principal's link is not yours to cancel
    assert tx_count(wallet) == posted


def test_an_invoice_totals_its_lines_and_falls_overdue(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    items = [
        LineItem(description="design", quantity=Decimal(3), unit_price=Decimal("40")),
        LineItem(description="hosting", unit_price=Decimal("9.99")),
    ]
    invoice = books(wallet).create(
        "ann", "invoice", "USDC", line_items=items, due=clock.now() + timedelta(days=7),
        key="i1", at=clock.now(),
    )  # fmt: skip
    assert invoice.amount == Decimal("129.99")
    with pytest.raises(WalletError):
        books(wallet).create("ann", "invoice", "USDC", key="i2", at=clock.now())
    with pytest.raises(WalletError):
        books(wallet).create(
            "ann", "invoice", "USDC", line_items=items, amount=Decimal(1), key="i3", at=clock.now()
        )
    clock.advance(timedelta(days=8))
    (listed,) = books(wallet).list("ann", "invoice", at=clock.now())
    assert listed.status == "overdue"
    assert books(wallet).list("ann", "invoice", at=clock.now(), status="open") == []


def test_the_capabilities_are_declared_truthfully(wallet: PaperWallet) -> None:
    caps = {c.name: c for c in payment_capabilities(wallet)}
    assert set(caps) == {*PAYMENT_READS, *PAYMENT_WRITES}
    for name in PAYMENT_READS:
        assert caps[name].kind == "read"
    for name in PAYMENT_WRITES:
        assert (caps[name].kind, caps[name].tier) == ("execute", "confirm")
        assert "mutating" in caps[name].flags


# --- through runs, and a payer in another process ------------------------------------------------


def scripted(*steps: Any) -> ScriptedModel:
    return ScriptedModel([Script("go", [*steps, Reply("done")])])


def agent_for(wallet: PaperWallet, store: SQLiteStore, *steps: Any) -> Agent:
    """The wallet agent (its guards and the balanced policy), on a script."""
    return build_wallet_agent(store, wallet, model=scripted(*steps))


async def approve_and_finish(agent: Agent, events: list[Any]) -> tuple[PendingAction, ToolCallEnd]:
    pending = next(e for e in events if isinstance(e, PendingAction))
    await agent.approve(pending.approval_id, by="ann")
    resumed = await collect(agent.resume(events[0].run_id))
    end = next(e for e in resumed if isinstance(e, ToolCallEnd) and e.name == pending.name)
    return pending, end


def pay_from_another_process(
    path: Path, reference: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    payer = [sys.executable, "-m", "fiduciary.wallet.payer"]
    return subprocess.run(
        [*payer, str(path), reference, "--from", PAYER, *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip


async def test_an_invoice_created_in_a_run_is_paid_by_another_process(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "wallet.sqlite3"
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    with PaperWallet(path, clock=clock) as wallet:
        wallet.open("ann")
        before = available(wallet, "ann", "USDC")
        lines = [{"description": "consulting", "quantity": "2", "unit_price": "150"}]
        agent = agent_for(
            wallet,
            store,
            ToolCalls([Call("create_invoice", {"asset": "USDC", "line_items": lines})]),
        )
        events = await collect(agent.run("go", principal="ann"))
        assert not [e for e in events if isinstance(e, ToolCallEnd)]  # it waits for a person
        pending, end = await approve_and_finish(agent, events)
        assert pending.tier == "confirm"
        assert "300 USDC" in pending.description
        assert pending.amount_usd is not None
        assert pending.amount_usd > 0
        assert not end.is_error, end.output
        reference = json.loads(end.output)["reference"]

        short = pay_from_another_process(path, reference, "--amount", "299")
        assert short.returncode == 1
        assert "amount_mismatch" in short.stderr
        paid = pay_from_another_process(path, reference)
        assert paid.returncode == 0, paid.stderr
        assert json.loads(paid.stdout)["status"] == "paid"
        assert available(wallet, "ann", "USDC") == before + Decimal(300)
        again = pay_from_another_process(path, reference)
        assert again.returncode == 1
        assert "already_paid" in again.stderr
        assert available(wallet, "ann", "USDC") == before + Decimal(300)

        later = agent_for(
            wallet,
            store,
            ToolCalls([Call("list_invoices")]),
            ToolCalls([Call("cancel_invoice", {"reference": reference})]),
        )
        events = await collect(later.run("go", principal="ann"))
        listed = next(e for e in events if isinstance(e, ToolCallEnd))
        (invoice,) = json.loads(listed.output)
        assert (invoice["reference"], invoice["status"]) == (reference, "paid")
        assert invoice["paid_by"] == PAYER
        _, cancel = await approve_and_finish(later, events)
        assert (cancel.is_error, cancel.error_code) == (True, "already_paid")
        assert wallet.verify().ok


async def test_a_cancelled_link_cannot_be_paid_from_outside(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "wallet.sqlite3"
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    with PaperWallet(path, clock=clock) as wallet:
        wallet.open("ann")
        agent = agent_for(
            wallet,
            store,
            ToolCalls(
                [Call("create_payment_link", {"asset": "SUI", "amount": "3", "memo": "tip"})]
            ),
        )
        events = await collect(agent.run("go", principal="ann"))
        pending, end = await approve_and_finish(agent, events)
        assert "3 SUI" in pending.description
        assert "tip" in pending.description
        reference = json.loads(end.output)["reference"]
        canceller = agent_for(
            wallet, store, ToolCalls([Call("cancel_payment_link", {"reference": reference})])
        )
        events = await collect(canceller.run("go", principal="ann"))
        pending, end = await approve_and_finish(canceller, events)
        assert reference in pending.description
        assert json.loads(end.output)["status"] == "cancelled"
        posted = tx_count(wallet)
        refused = pay_from_another_process(path, reference)
        assert refused.returncode == 1
        assert "already_cancelled" in refused.stderr
        assert tx_count(wallet) == posted
