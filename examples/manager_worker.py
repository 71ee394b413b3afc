"""A manager agent that hands work to a billing agent: delegation, gated and durable.

    python examples/manager_worker.py

The manager may look invoices up and pay them; it delegates the paying to ``billing``
(``Agent(..., delegates={"billing": billing})``). The billing agent's run is a run of its own,
linked to the manager's, acting for the same person: its payment waits for that person like
any other, shown here with the manager's task it serves, and the manager waits for its answer
durably (status ``awaiting_child``: no drive, no lease); once the person approved, resuming the
billing run (with the manager, whose table names billing) ends it and delivers its answer.
Billing could also close an account, but the manager may not, so billing may not either: its
attempt is refused. A scripted model plays both agents, offline.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from uuid import UUID

from fiduciary import Agent, Operation, Policy, capability
from fiduciary.delegation import children, lineage
from fiduciary.events import RunCompleted, ToolCallEnd, ToolCallRejected
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls

PRINCIPAL = "alice"
INVOICES = {"INV-7": ("electricity", Decimal("120.00"))}
PAID: list[str] = []

POLICY = Policy(preset=None, operations=[Operation("pay", confirm_below="1000")])


@capability
def look_up_invoice(invoice_id: str) -> dict[str, str]:
    """An invoice's payee and amount."""
    payee, usd = INVOICES[invoice_id]
    return {"invoice_id": invoice_id, "payee": payee, "usd": str(usd)}


@capability(
    kind="execute", operation="pay", amount_usd=lambda args, ctx: INVOICES[args.invoice_id][1]
)
def pay_invoice(invoice_id: str) -> dict[str, str]:
    """Pay an invoice in full."""
    PAID.append(invoice_id)
    return {"invoice_id": invoice_id, "paid": str(INVOICES[invoice_id][1])}


@capability(kind="execute", operation="close_account")
def close_account(reason: str) -> dict[str, str]:
    """Close the customer's account."""
    return {"closed": reason}


def allow(request: object) -> bool:
    return True  # the host's authorization: everything, for this example


BILLING_SCRIPT = Script(
    "INV-7",
    [
        ToolCalls([Call("close_account", {"reason": "nothing left to pay"})]),
        ToolCalls([Call("look_up_invoice", {"invoice_id": "INV-7"})]),
        ToolCalls([Call("pay_invoice", {"invoice_id": "INV-7"})]),
        Reply(lambda r: f"Paid ${r['pay_invoice']['paid']} for INV-7."),
    ],
)


def manager_answer(results: Results) -> str:
    return f"Billing says: {results['delegate']['text']}"


MANAGER_SCRIPT = Script(
    "electricity",
    [
        ToolCalls([Call("delegate", {"agent": "billing", "task": "Pay invoice INV-7."})]),
        Reply(manager_answer),
    ],
)


def build() -> tuple[Agent, Agent]:
    store = MemoryStore()
    billing = Agent(
        model=ScriptedModel([BILLING_SCRIPT]),
        capabilities=[look_up_invoice, pay_invoice, close_account],
        store=store,
        policy=POLICY,
        authorize=allow,
    )
    manager = Agent(
        model=ScriptedModel([MANAGER_SCRIPT]),
        capabilities=[look_up_invoice, pay_invoice],
        store=store,
        policy=POLICY,
        authorize=allow,
        delegates={"billing": billing},
    )
    return manager, billing


async def approve_when_asked(billing: Agent) -> list[UUID]:
    """The person's side: a card shows the child's pending payment with the manager's task."""
    pending = await billing.pending_approvals(principal=PRINCIPAL)
    for approval in pending:
        runs = await lineage(billing.store, approval.run_id)
        usd = approval.amount_usd
        print(f"  {runs[0].delegate} waits for a person: {approval.capability} ${usd}")
        print(f"    delegated for: {runs[-1].title}")
        print(f"  approved by {PRINCIPAL}")
        await billing.approve(
            approval.approval_id, by=PRINCIPAL, confirm_amount=approval.amount_usd
        )
    return [approval.run_id for approval in pending]


async def main() -> None:
    manager, billing = build()
    message = "Please pay my electricity invoice, INV-7."
    print(f"> {message}")
    started = [event async for event in manager.run(message, principal=PRINCIPAL)]
    run_id = started[0].run_id
    status = (await manager.get_run(run_id)).status
    print(f"  the manager's run is {status}: it waits for billing, holding nothing")
    for child in await approve_when_asked(billing):
        async for _ in manager.resume(child):  # billing's run, then the manager's
            pass
    for logged in await manager.store.read_events(run_id):
        if isinstance(logged, RunCompleted):
            print(logged.text)
    [child] = await children(manager.store, run_id)
    for logged in await manager.store.read_events(child):
        if isinstance(logged, ToolCallRejected):
            print(f"  billing was refused {logged.name}: {logged.reason}")
        elif isinstance(logged, ToolCallEnd):
            print(f"  billing: {logged.name} {logged.output}")
    print(f"paid: {PAID}")


if __name__ == "__main__":
    asyncio.run(main())
