"""What the wallet's agent knows before it is asked: a financial snapshot and facts from the ledger.

- ``financial_context(wallet)``: the domain-context layer of the system prompt, a
  ``<financial_context>`` block computed from the ledger once per user message (balances with
  their USD value, savings, debt, health factor, net worth).
- ``ledger_facts(wallet, principal)``: memory records derived from the ledger ("Paid Alice 3
  times, 45 USDC in all") that ``remember_ledger_facts`` keeps in a ``Memory`` as kind
  ``fact``, replacing the previous ones, so that a later conversation recalls them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from ..capabilities import Principal
from ..clock import Clock, SystemClock
from ..context.memory import Memory
from .wallet import PaperWallet

__all__ = ["financial_context", "ledger_facts", "remember_ledger_facts"]


def _amount(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text if "." not in text else text.rstrip("0").rstrip(".")


def financial_context(
    wallet: PaperWallet, clock: Clock | None = None
) -> Callable[[Principal], str]:
    """A callable of the principal returning its ``<financial_context>`` snapshot."""
    now = (clock or SystemClock()).now

    def snapshot(principal: Principal) -> str:
        at = now()
        report = wallet.balances(principal.actor_id, at=at)
        health = wallet.health(principal.actor_id, at)
        lines = [f"As of {at:%Y-%m-%d %H:%M} UTC (paper wallet):"]
        for title, holdings in (
            ("Available", report.available),
            ("Savings", report.savings),
            ("Debt", report.debt),
            ("Rewards", report.rewards),
        ):
            if holdings:
                listed = ", ".join(
                    f"{_amount(h.amount)} {h.asset} (${h.usd:,.2f})" for h in holdings
                )
                lines.append(f"{title}: {listed}")
        if health.health_factor is not None:
            lines.append(f"Health factor: {health.health_factor} ({health.risk})")
        lines.append(f"Net worth: ${report.total_usd:,.2f}")
        body = "\n".join(lines)
        return f"<financial_context>\n{body}\n</financial_context>"

    return snapshot


def ledger_facts(wallet: PaperWallet, principal: str, limit: int = 500) -> list[str]:
    """Facts a person would expect the agent to know, derived from the principal's ledger."""
    sent: dict[str, tuple[int, dict[str, Decimal], datetime]] = {}
    for tx in wallet.ledger.read().transactions(principal=principal, limit=limit):
        if tx.kind != "send":
            continue
        who = str(tx.meta.get("contact") or tx.meta.get("to") or "?")
        asset = str(tx.meta.get("asset", ""))
        amount = Decimal(str(tx.meta.get("amount", "0")))
        count, totals, last = sent.get(who, (0, {}, tx.at))
        totals[asset] = totals.get(asset, Decimal(0)) + amount
        sent[who] = (count + 1, totals, max(last, tx.at))
    facts = []
    for who, (count, totals, last) in sorted(sent.items(), key=lambda kv: -kv[1][0]):
        times = "once" if count == 1 else f"{count} times"
        total = ", ".join(f"{_amount(v)} {a}".strip() for a, v in sorted(totals.items()))
        facts.append(f"fact: paid {who} {times}, {total} in all; last on {last:%Y-%m-%d}")
    return facts


async def remember_ledger_facts(wallet: PaperWallet, principal: str, memory: Memory) -> int:
    """Replace the principal's ``fact`` records with the ledger's current facts (nothing is
    written when they are the same); their count."""
    kept = await memory.records(namespace=principal, kind="fact", limit=1_000)
    facts = ledger_facts(wallet, principal)
    if sorted(r.text for r in kept) == sorted(facts):
        return len(facts)
    for record in kept:
        await memory.forget(record.record_id, namespace=principal)
    for fact in facts:
        await memory.remember(fact, namespace=principal, kind="fact")
    return len(facts)
