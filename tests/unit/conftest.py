"""Shared fixtures for unit tests: a manual clock, an in-memory store, a ledger of effects, and
``make_agent``, the one way tests build an agent over the toy capabilities."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, CallContext, Clock, ManualClock, capability
from fiduciary.capabilities import Capability
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import MemoryStore, Script, ScriptedModel, allow_all


@dataclass
class Effects:
    """What the toy capabilities did: every handler entry, by idempotency key."""

    payments: list[dict[str, Any]] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each loop test runs on the in-memory store and on a real SQLite file."""
    backend: Store = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "runs.sqlite3")
    )
    yield backend
    await backend.close()


@pytest.fixture
def effects() -> Effects:
    return Effects()


def toy_capabilities(effects: Effects) -> list[Capability]:
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
    effects: Effects,
    store: Store,
    clock: Clock | None = None,
    *scripts: Script,
    **overrides: Any,
) -> Agent:
    """An agent over the toy capabilities and a model playing ``scripts``, whose host allows
    every call; any other ``Agent`` option (or these: ``model=``, ``capabilities=``,
    ``authorize=``) by keyword."""
    options: dict[str, Any] = {
        "model": ScriptedModel(list(scripts)),
        "capabilities": toy_capabilities(effects),
        "store": store,
        "authorize": allow_all,
    }
    if clock is not None:
        options["clock"] = clock
    options.update(overrides)
    return Agent(**options)
