"""The one way tests build an agent: ``make_agent(**overrides)``, over the toy capabilities.

Every test folder (and the child processes the crash tests start) builds its agents here, so an
``Agent`` option added, renamed or frozen changes one function. A test that needs other
capabilities, a policy, a lease or a model passes them as keywords; a helper that builds the same
agent in several tests of one file is named for what it builds (``spending_agent``,
``server_agent``) and calls ``make_agent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from fiduciary import Agent, CallContext, Clock, capability
from fiduciary.capabilities import Capability
from fiduciary.stores.base import Store
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, allow_all


@dataclass
class Effects:
    """What the toy capabilities did: every handler entry, by idempotency key."""

    payments: list[dict[str, Any]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)


def toy_capabilities(effects: Effects) -> list[Capability]:
    """``balance`` and ``rates`` (reads) and ``send`` (a high-risk payment into ``effects``)."""

    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance of an account, in USD."""
        return {"account": account, "usd": "250.00"}

    @capability(kind="read")
    async def rates(currency: str = "EUR") -> dict[str, str]:
        """The exchange rate of a currency to USD."""
        return {"currency": currency, "usd": "1.08"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(str(args.amount))

    @capability(
        kind="execute",
        risk="high",
        operation="send",
        amount_usd=amount,
        flags={"irreversible", "mutating"},
        modifiable_fields=["amount", "memo"],
    )
    async def send(to: str, amount: Decimal, memo: str = "", *, ctx: CallContext) -> dict[str, Any]:
        """Send USD to a recipient."""
        effects.entries.append(ctx.idempotency_key)
        effects.payments.append({"to": to, "amount": amount, "memo": memo})
        return {"sent": str(amount), "to": to, "reference": ctx.idempotency_key[-8:]}

    return [balance, rates, send]


def make_agent(
    effects: Effects | None = None,
    store: Store | None = None,
    clock: Clock | None = None,
    *scripts: Script,
    **overrides: Any,
) -> Agent:
    """An agent whose model plays ``scripts``, over the toy capabilities (recording into
    ``effects``), on ``store`` (a fresh in-memory one by default), whose host allows every call.
    Any ``Agent`` option by keyword overrides these (``model=``, ``capabilities=``,
    ``authorize=``, ``policy=``, ``lease_seconds=``, ...)."""
    options: dict[str, Any] = {
        "model": ScriptedModel(list(scripts)),
        "store": store if store is not None else MemoryStore(),
        "authorize": allow_all,
    }
    if "capabilities" not in overrides:
        options["capabilities"] = toy_capabilities(effects if effects is not None else Effects())
    if clock is not None:
        options["clock"] = clock
    options.update(overrides)
    return Agent(**options)


def invoice_payer() -> Capability:
    """``pay(usd)``: an execute capability priced at its amount (a card above the threshold)."""

    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    def pay(usd: str) -> dict[str, str]:
        """Pay an invoice."""
        return {"paid": usd}

    return pay


def billing_manager(options: dict[str, Any], *, paid: str = "paid") -> Agent:
    """A manager whose scripted model hands "pay the invoice" to its delegate ``billing``, a
    worker whose model pays $5 and answers ``paid``; both with ``options`` (store, clock, ...)."""
    worker = Agent(
        model=ScriptedModel(
            [Script("invoice", [ToolCalls([Call("pay", {"usd": "5"})]), Reply(paid)])]
        ),
        capabilities=[invoice_payer()],
        **options,
    )
    task = {"agent": "billing", "task": "pay the invoice"}
    return Agent(
        model=ScriptedModel(
            [Script("settle", [ToolCalls([Call("delegate", task)]), Reply("done")])]
        ),
        capabilities=[invoice_payer()],
        delegates={"billing": worker},
        **options,
    )
