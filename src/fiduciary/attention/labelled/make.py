"""Writes ``events.jsonl``: wallet and operations events, each labelled with the route a careful
assistant should take (``python -m fiduciary.attention.labelled.make`` regenerates it; the
output is deterministic).

How it was labelled: the events are drawn from templates of what a paper-wallet operator sees
(payments, price moves, health factors, failed runs, expired approvals, unknown outcomes,
webhook messages), with amounts, assets and wording varied by a seeded generator. Each was then
labelled by the rubric below, written before the generator and applied to every event; the
``note`` of each line says which rule decided it. The rubric is one person's judgment, not an
agreement between several labellers, and borderline cases sit on thresholds on purpose, so a
judge is tested where the line is thin.

Rubric (routes: act = start a plan-first agent run, notify = tell the person, drop = nothing):
- ``unknown_outcome``: act (the agent must check with a read capability what happened).
- ``health_factor_low``: below 1.2 act (propose a repayment now); 1.2 to 1.5 notify; else drop.
- ``price_move``: a held position worth at least $500 moving 15 % or more: act (review and
  propose a rebalance); moving 7 % to 15 %: notify; otherwise (small moves, assets not held,
  small positions) drop.
- ``payment_received``: $5,000 or more from an unknown sender: notify (a mistake or a scam
  needs a person); a memo naming an open invoice: act (reconcile it); otherwise drop.
- ``run_failed_budget``: a routine report: drop; anything else: notify (only a person raises a
  budget).
- ``approval_expired``: a recurring payment under $50: act (propose it again); otherwise notify.
- ``invoice_due``: due within 3 days: act (propose the payment); later: drop.
- ``login_new_device``: an unknown location: notify; a known one: drop.
- ``newsletter``, ``statement_ready``: drop.
- ``savings_rate_change``: a fall of 2 points or more on a held asset: notify; else drop.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("events.jsonl")
START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
ASSETS = ("ETH", "SUI", "USDC", "BTC", "SOL")
PRINCIPALS = ("ann", "bob", "carla", "dev")
CONTACTS = ("Landlord", "Payroll Inc", "Mum", "Acme Clients Ltd", "Gym")
CITIES_KNOWN = ("Lisbon", "Porto")
CITIES_NEW = ("Lagos", "Minsk", "Jakarta", "Caracas", "Reykjavik")


def _usd(rng: random.Random, low: float, high: float) -> str:
    return str(Decimal(str(rng.uniform(low, high))).quantize(Decimal("0.01")))


Context = list[dict[str, Any]]
Labelled = tuple[dict[str, Any], str, str, Context]


def _unknown_outcome(rng: random.Random, context: Context) -> Labelled:
    cap = rng.choice(["send", "swap", "repay_debt", "borrow"])
    return (
        {"capability": cap, "run_id": f"run-{rng.randrange(10**6)}"},
        "act",
        "unknown outcome: check it",
        context,
    )


def _health_factor_low(rng: random.Random, context: Context) -> Labelled:
    hf = round(rng.uniform(1.02, 1.75), 3)
    label, note = (
        ("act", "hf < 1.2")
        if hf < 1.2
        else ("notify", "1.2 <= hf < 1.5")
        if hf < 1.5
        else ("drop", "hf >= 1.5")
    )
    debt = _usd(rng, 200, 9000)
    if rng.random() < 0.3:
        context.append(
            {
                "role": "context",
                "type": "price_move",
                "data": {"asset": "ETH", "change_24h_pct": "-9.1"},
            }
        )
    return {"health_factor": str(hf), "debt_usd": debt}, label, note, context


def _price_move(rng: random.Random, context: Context) -> Labelled:
    asset = rng.choice(ASSETS[:2] + ASSETS[3:])
    change = round(rng.choice([-1, 1]) * rng.uniform(1, 28), 2)
    held = Decimal(_usd(rng, 0, 6000)) if rng.random() < 0.8 else Decimal(0)
    if held >= 500 and abs(change) >= 15:
        label, note = "act", "held >= $500 and |move| >= 15%"
    elif held >= 500 and abs(change) >= 7:
        label, note = "notify", "held >= $500 and 7% <= |move| < 15%"
    else:
        label, note = "drop", "small move or small/no position"
    return (
        {"asset": asset, "change_24h_pct": str(change), "position_usd": str(held)},
        label,
        note,
        context,
    )


def _payment_received(rng: random.Random, context: Context) -> Labelled:
    known = rng.random() < 0.55
    sender = rng.choice(CONTACTS) if known else f"0x{rng.randrange(16**8):08x}…"
    amount = _usd(rng, 5, 12000)
    invoice = (not known and rng.random() < 0.25) or (known and rng.random() < 0.2)
    memo = (
        f"invoice INV-{rng.randrange(1000, 9999)}"
        if invoice
        else rng.choice(["", "thanks", "rent", "dinner", "refund"])
    )
    if not known and Decimal(amount) >= 5000:
        label, note = "notify", "unknown sender, >= $5,000"
    elif invoice:
        label, note = "act", "memo names an open invoice: reconcile"
    else:
        label, note = "drop", "ordinary payment"
    return (
        {"amount_usd": amount, "from": sender, "known_sender": known, "memo": memo},
        label,
        note,
        context,
    )


def _run_failed_budget(rng: random.Random, context: Context) -> Labelled:
    routine = rng.random() < 0.35
    title = (
        "weekly balance report"
        if routine
        else rng.choice(
            ["pay the plumber", "rebalance into USDC", "repay the loan", "answer Mum's request"]
        )
    )
    label, note = ("drop", "routine report") if routine else ("notify", "a person raises budgets")
    return (
        {"title": title, "routine": routine, "budget_usd": _usd(rng, 0.05, 2)},
        label,
        note,
        context,
    )


def _approval_expired(rng: random.Random, context: Context) -> Labelled:
    recurring = rng.random() < 0.4
    amount = _usd(rng, 5, 49.99) if recurring and rng.random() < 0.7 else _usd(rng, 20, 3000)
    if recurring and Decimal(amount) < 50:
        label, note = "act", "recurring < $50: propose again"
    else:
        label, note = "notify", "expired approval"
    return (
        {"capability": "send", "amount_usd": amount, "recurring": recurring},
        label,
        note,
        context,
    )


def _invoice_due(rng: random.Random, context: Context) -> Labelled:
    days = rng.randrange(0, 21)
    label, note = ("act", "due within 3 days") if days <= 3 else ("drop", "due later")
    return (
        {"payee": rng.choice(CONTACTS), "amount_usd": _usd(rng, 20, 2500), "due_in_days": days},
        label,
        note,
        context,
    )


def _login_new_device(rng: random.Random, context: Context) -> Labelled:
    known = rng.random() < 0.4
    city = rng.choice(CITIES_KNOWN if known else CITIES_NEW)
    label, note = ("drop", "known location") if known else ("notify", "unknown location")
    return (
        {"city": city, "device": rng.choice(["iPhone", "Linux", "Windows"])},
        label,
        note,
        context,
    )


def _savings_rate_change(rng: random.Random, context: Context) -> Labelled:
    asset = rng.choice(["USDC", "ETH", "SUI"])
    delta = round(rng.uniform(-4, 2), 2)
    holds = rng.random() < 0.75
    label, note = (
        ("notify", "held and fell >= 2 points")
        if holds and delta <= -2
        else ("drop", "small change or not held")
    )
    return (
        {"asset": asset, "apy_change_points": str(delta), "held": holds},
        label,
        note,
        context,
    )


def _notice(kind: str, rng: random.Random, context: Context) -> Labelled:
    """A newsletter or a statement: always dropped."""
    subjects = {
        "newsletter": ["March news", "Five tips for saving"],
        "statement_ready": ["Your February statement is ready"],
    }
    return {"subject": rng.choice(subjects[kind])}, "drop", kind, context


_RULES: dict[str, Callable[[random.Random, Context], Labelled]] = {
    "unknown_outcome": _unknown_outcome,
    "health_factor_low": _health_factor_low,
    "price_move": _price_move,
    "payment_received": _payment_received,
    "run_failed_budget": _run_failed_budget,
    "approval_expired": _approval_expired,
    "invoice_due": _invoice_due,
    "login_new_device": _login_new_device,
    "savings_rate_change": _savings_rate_change,
}


def _event(kind: str, rng: random.Random) -> Labelled:
    """(data, label, note, context) for one event of ``kind``, by its rule of the rubric."""
    context: Context = []
    rule = _RULES.get(kind)
    return rule(rng, context) if rule is not None else _notice(kind, rng, context)


KINDS = (
    ("unknown_outcome", "fiduciary", 14),
    ("health_factor_low", "wallet", 30),
    ("price_move", "wallet", 48),
    ("payment_received", "wallet", 44),
    ("run_failed_budget", "fiduciary", 20),
    ("approval_expired", "fiduciary", 22),
    ("invoice_due", "webhooks", 22),
    ("login_new_device", "webhooks", 14),
    ("savings_rate_change", "wallet", 16),
    ("newsletter", "webhooks", 6),
    ("statement_ready", "webhooks", 6),
)


def make() -> list[dict[str, Any]]:
    rng = random.Random(17)
    lines: list[dict[str, Any]] = []
    for kind, source, count in KINDS:
        for _ in range(count):
            data, label, note, context = _event(kind, rng)
            lines.append(
                {
                    "type": kind,
                    "source": source,
                    "principal": rng.choice(PRINCIPALS),
                    "data": data,
                    "label": label,
                    "note": note,
                    **({"context": context} if context else {}),
                }
            )
    rng.shuffle(lines)
    for i, line in enumerate(lines):
        line["id"] = f"lab-{i:03d}"
        line["at"] = (START + timedelta(minutes=37 * i)).isoformat()
        role = "consequence" if line["source"] == "fiduciary" else "context"
        line["role"] = role
    return [{k: line[k] for k in ("id", "at", *sorted(set(line) - {"id", "at"}))} for line in lines]


def main() -> None:
    OUT.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in make()))


if __name__ == "__main__":
    main()
