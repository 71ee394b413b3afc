"""The scripted run the loop benchmarks measure (``loop.py``, ``traced.py``, ``peers.py``):
two reads in parallel, one auto-approved write, a final text; its handlers, its agent and a
batch of runs of it. Its own module so that the benchmarks share it without importing each
other.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

MESSAGE = "check and save"
FINAL = "Your balance is 250 USD and the rate is 1.08; I saved 5 USD."


async def balance_fn(account: str = "main") -> dict[str, str]:
    return {"account": account, "usd": "250.00"}


async def rate_fn(currency: str = "EUR") -> dict[str, str]:
    return {"currency": currency, "usd": "1.08"}


async def save_fn(amount: str) -> dict[str, str]:
    return {"saved": amount}


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance."""
        return await balance_fn(account)

    @capability(kind="read")
    async def rate(currency: str = "EUR") -> dict[str, str]:
        """An exchange rate."""
        return await rate_fn(currency)

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="save", amount_usd=amount)
    async def save(amount: str) -> dict[str, str]:
        """Save money."""
        return await save_fn(amount)

    return [balance, rate, save]


def script() -> Script:
    return Script(
        MESSAGE,
        [
            ToolCalls([Call("balance"), Call("rate")]),
            ToolCalls([Call("save", {"amount": "5"})]),
            Reply(FINAL, chunk_chars=len(FINAL)),
        ],
    )


def make_agent(store: Store) -> Agent:
    return Agent(
        model=ScriptedModel([script()]),
        capabilities=capabilities(),
        store=store,
        policy=Policy(daily_autonomous_limit_usd=None),
        authorize=allow_all,
        guards=[],
    )


async def fiduciary_batch(agent: Agent, n: int, concurrency: int = 1) -> int:
    async def one(principal: str) -> int:
        count = 0
        async for _event in agent.run(MESSAGE, principal=principal):
            count += 1
        return count

    events = 0
    for start in range(0, n, concurrency):
        # one principal per concurrent run: writes of one principal are serialised by design
        width = min(concurrency, n - start)
        counts = await asyncio.gather(*(one(f"bench-{i}") for i in range(width)))
        events += sum(counts)
    return events
