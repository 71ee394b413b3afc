"""The offline demo: a scripted conversation over three toy billing capabilities.

It shows two reads running in parallel, a small payment executed on its own, a larger one that
waits for a person (answered at the terminal, or approved with ``--yes``), and where the run's
log lives. No network and no API key are needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from .agent import Agent
from .capabilities import CallContext, Capability, capability
from .clock import Clock
from .exceptions import CapabilityError
from .gates import AuthorizationRequest
from .models.scripted import Call, Reply, Results, Script, ScriptedModel, ToolCalls
from .policy import Policy
from .stores.base import Store

__all__ = ["DEMO_MESSAGE", "DEMO_PRINCIPAL", "Billing", "build_demo_agent", "demo_script"]

DEMO_PRINCIPAL = "demo-user"
DEMO_MESSAGE = "Please pay my open bills: the coffee subscription and the phone bill."


class Invoice(BaseModel):
    id: str
    payee: str
    amount_usd: Decimal
    paid: bool


class Balance(BaseModel):
    available_usd: Decimal


class Payment(BaseModel):
    invoice_id: str
    paid_usd: Decimal
    balance_after_usd: Decimal
    reference: str


@dataclass
class Billing:
    """A toy account with invoices; payments honour the server-made idempotency key."""

    balance: Decimal = Decimal("120.00")
    invoices: dict[str, Invoice] = field(
        default_factory=lambda: {
            "inv-101": Invoice(
                id="inv-101", payee="Bean There Coffee", amount_usd=Decimal("4.00"), paid=False
            ),
            "inv-102": Invoice(
                id="inv-102", payee="Mobile Co", amount_usd=Decimal("42.50"), paid=False
            ),
        }
    )
    references: dict[str, Payment] = field(default_factory=dict)

    def capabilities(self) -> list[Capability]:
        billing = self

        @capability(kind="read")
        async def account_balance() -> Balance:
            """The money available in the person's account, in USD."""
            return Balance(available_usd=billing.balance)

        @capability(kind="read")
        async def list_invoices(unpaid_only: bool = True) -> list[Invoice]:
            """The person's invoices (by default only the unpaid ones)."""
            return [i for i in billing.invoices.values() if not (unpaid_only and i.paid)]

        def amount(args: Any, ctx: CallContext) -> Decimal | None:
            invoice = billing.invoices.get(args.invoice_id)
            return None if invoice is None else invoice.amount_usd

        @capability(
            kind="execute",
            risk="medium",
            operation="pay",
            amount_usd=amount,
            flags={"mutating", "requires_balance"},
            idempotency_key=lambda args, ctx: f"{ctx.run_id}:pay:{args.invoice_id}",
            describe=lambda args: (
                f"Pay invoice {args.invoice_id} ({billing.invoices[args.invoice_id].payee})"
                if args.invoice_id in billing.invoices
                else f"Pay invoice {args.invoice_id}"
            ),
        )
        async def pay_invoice(invoice_id: str, ctx: CallContext) -> Payment:
            """Pay one invoice in full from the account. One payment per invoice, ever."""
            if ctx.idempotency_key in billing.references:
                return billing.references[ctx.idempotency_key]
            invoice = billing.invoices.get(invoice_id)
            if invoice is None:
                raise CapabilityError("unknown_invoice", f"there is no invoice {invoice_id}")
            if invoice.paid:
                raise CapabilityError("already_paid", f"invoice {invoice_id} is already paid")
            if invoice.amount_usd > billing.balance:
                raise CapabilityError(
                    "insufficient_funds",
                    f"{invoice.amount_usd} USD needed, {billing.balance} USD available",
                )
            billing.balance -= invoice.amount_usd
            invoice.paid = True
            payment = Payment(
                invoice_id=invoice_id,
                paid_usd=invoice.amount_usd,
                balance_after_usd=billing.balance,
                reference=ctx.idempotency_key,
            )
            billing.references[ctx.idempotency_key] = payment
            return payment

        return [account_balance, list_invoices, pay_invoice]


def _summary(results: Results) -> str:
    paid = [v for v in results.by_id.values() if isinstance(v, dict) and "paid_usd" in v]
    lines = [f"- {p['invoice_id']}: paid ${p['paid_usd']}" for p in paid]
    if not lines:
        lines = ["- nothing was paid"]
    declined = [e for e in results.errors.values() if "declined" in e or "denied" in e]
    if declined:
        lines.append("- the phone bill was not paid: you declined it")
    balance = (
        paid[-1]["balance_after_usd"]
        if paid
        else results.get("account_balance", {}).get("available_usd", "?")
    )
    return "Here is what I did:\n" + "\n".join(lines) + f"\nYour balance is now ${balance}."


def demo_script() -> Script:
    def payments(results: Results) -> list[str]:
        invoices = results["list_invoices"]
        return [i["id"] for i in invoices]

    return Script(
        match="open bills",
        name="pay-bills",
        steps=[
            ToolCalls(
                [Call("account_balance"), Call("list_invoices", {"unpaid_only": True})],
                text="Let me look at your balance and your open invoices.",
            ),
            ToolCalls(
                [
                    Call("pay_invoice", lambda r: {"invoice_id": payments(r)[0]}),
                    Call("pay_invoice", lambda r: {"invoice_id": payments(r)[1]}),
                ],
                text="You have enough to cover both. Paying them now.",
            ),
            Reply(_summary),
        ],
    )


def _authorize(request: AuthorizationRequest) -> bool:
    # the demo person may pay their own bills and nothing else
    return request.capability.name == "pay_invoice" and request.principal.actor_id == DEMO_PRINCIPAL


def build_demo_agent(store: Store, billing: Billing, *, clock: Clock | None = None) -> Agent:
    return Agent(
        model=ScriptedModel([demo_script()]),
        capabilities=billing.capabilities(),
        store=store,
        policy=Policy(preset="balanced"),
        authorize=_authorize,
        clock=clock,
        system="You help a person pay their bills. Check the balance before paying.",
    )
