"""A shop's support agent: orders and refunds, under the shop's own policy operations.

    python examples/shop.py

The policy knows none of the wallet's words (``preset=None``), only the shop's operations: a
refund below $25 runs on its own, one below $500 waits for a person, a larger one also has its
amount re-typed, and one above $2,000 never runs. Cancelling an order carries no amount: it
runs on its own. A scripted model plays the support conversations, offline.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from fiduciary import (
    Agent,
    CallContext,
    Capability,
    CapabilityError,
    Event,
    Model,
    Operation,
    PendingAction,
    Policy,
    RunCompleted,
    RunFailed,
    TextDelta,
    ToolCallEnd,
    capability,
)
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls

PRINCIPAL = "support"  # the support desk the agent works for

POLICY = Policy(
    preset=None,
    operations=[
        Operation("refund", auto_below="25", confirm_below="500", deny_above="2000"),
        Operation("cancel_order", tier="auto"),
    ],
    daily_autonomous_limit_usd=Decimal("200"),  # refunds without a person, per day
)


@dataclass
class Order:
    id: str
    customer: str
    total: Decimal
    status: str = "paid"  # paid, shipped or cancelled
    refunded: Decimal = Decimal(0)


def _orders() -> dict[str, Order]:
    return {
        "A-1001": Order("A-1001", "ana@example.com", Decimal("36.00"), "shipped"),
        "A-1002": Order("A-1002", "ben@example.com", Decimal("180.00"), "shipped"),
        "A-1003": Order("A-1003", "cy@example.com", Decimal("54.50")),
    }


@dataclass
class Shop:
    orders: dict[str, Order] = field(default_factory=_orders)
    refunds: dict[str, dict[str, str]] = field(default_factory=dict)  # by idempotency key

    def capabilities(self) -> list[Capability]:
        shop = self

        def order(order_id: str) -> Order:
            if order_id not in shop.orders:
                raise CapabilityError("not_found", f"there is no order {order_id}")
            return shop.orders[order_id]

        @capability(kind="read")
        async def find_order(order_id: str) -> dict[str, str]:
            """An order: its customer, total, status and what was refunded, in USD."""
            found = order(order_id)
            return {k: str(v) for k, v in vars(found).items()}

        @capability(
            kind="execute",
            operation="refund",  # the policy's "refund" operation decides the tier
            amount_usd=lambda args, ctx: args.amount,
            modifiable_fields=["amount"],
            describe=lambda args: f"Refund ${args.amount:,.2f} on {args.order_id} ({args.reason})",
        )
        async def refund(
            order_id: str, amount: Decimal, reason: str, ctx: CallContext
        ) -> dict[str, str]:
            """Refund part or all of an order to the customer's card, in USD."""
            if ctx.idempotency_key in shop.refunds:  # a real payment API dedupes on the key
                return shop.refunds[ctx.idempotency_key]
            found = order(order_id)
            if amount <= 0 or found.refunded + amount > found.total:
                raise CapabilityError("invalid_amount", f"at most ${found.total - found.refunded}")
            found.refunded += amount
            done = {"order_id": order_id, "refunded": str(amount), "to": found.customer}
            shop.refunds[ctx.idempotency_key] = done
            return done

        @capability(kind="execute", operation="cancel_order")
        async def cancel_order(order_id: str) -> dict[str, str]:
            """Cancel an order that has not shipped yet."""
            found = order(order_id)
            if found.status != "paid":
                raise CapabilityError("conflict", f"{order_id} is {found.status}")
            found.status = "cancelled"
            return {"order_id": order_id, "status": found.status}

        return [find_order, refund, cancel_order]


def _done(results: Results) -> str:
    if "refund" in results:
        return f"Refunded ${results['refund']['refunded']} to {results['refund']['to']}."
    if "cancel_order" in results:
        return f"Order {results['cancel_order']['order_id']} is cancelled."
    return "Nothing was changed."


def _in_full(results: Results) -> dict[str, Any]:
    total = results["find_order"]["total"]
    return {"order_id": "A-1002", "amount": total, "reason": "never arrived"}


def scripted_model() -> Model:
    """Plays the support requests of ``MESSAGES`` (a real model decides by itself)."""

    def look_up(order_id: str) -> ToolCalls:
        return ToolCalls([Call("find_order", {"order_id": order_id})])

    chipped = {"order_id": "A-1001", "amount": "12", "reason": "chipped mug"}
    cancel = {"order_id": "A-1003"}
    return ScriptedModel(
        [
            Script(
                "chipped", [look_up("A-1001"), ToolCalls([Call("refund", chipped)]), Reply(_done)]
            ),
            Script(
                "arrived", [look_up("A-1002"), ToolCalls([Call("refund", _in_full)]), Reply(_done)]
            ),
            Script("cancel", [ToolCalls([Call("cancel_order", cancel)]), Reply(_done)]),
        ]
    )


MESSAGES = [
    "Order A-1001 arrived with a chipped mug: refund 12 dollars.",
    "Order A-1002 never arrived: refund it in full.",
    "Please cancel A-1003, the customer changed their mind.",
]


def build_agent(shop: Shop, model: Model | None = None) -> Agent:
    return Agent(
        model=model or scripted_model(),
        capabilities=shop.capabilities(),
        policy=POLICY,
        authorize=lambda request: request.principal.actor_id == PRINCIPAL,
        system="You are a shop's support agent. Look an order up before you change it.",
    )


def show(event: Event) -> None:
    if isinstance(event, ToolCallEnd) and event.name != "find_order":
        print(f"  {event.name}: {event.output}")
    elif isinstance(event, PendingAction):
        print(f"  waits for a person ({event.tier}): {event.description}")
    elif isinstance(event, TextDelta):
        print(event.text, end="")
    elif isinstance(event, RunCompleted):
        print()
    elif isinstance(event, RunFailed):
        print(f"  the run failed ({event.reason}): {event.message}")


async def main() -> None:
    shop = Shop()
    agent = build_agent(shop)
    for message in MESSAGES:
        print(f"> {message}")
        async for event in agent.run(message, principal=PRINCIPAL):
            show(event)
        for approval in await agent.pending_approvals(principal=PRINCIPAL):
            print(f"  approved by {PRINCIPAL}")  # in an app: a card someone clicks
            await agent.approve(approval.approval_id, by=PRINCIPAL)
            async for event in agent.resume(approval.run_id):
                show(event)
    for order in shop.orders.values():
        print(f"{order.id}: {order.status}, refunded ${order.refunded}")


if __name__ == "__main__":
    asyncio.run(main())
