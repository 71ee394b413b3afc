"""A tick whose process stops mid-way is continued by another, each step at most once."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import CallContext, ManualClock, MemoryStore, capability
from fiduciary.apps import MemoryAppTables

from .support import Book, Hooks, engine

APP = """---
id: dca
hooks: [tick]
tier: standard
capabilities: [balance, buy]
config: {approve: false}
---
Buy.
"""
# the same, with the operation a person allows when enabling it: its autonomous budget
PERMITTED = APP.replace(
    "capabilities: [balance, buy]", "capabilities: [balance, buy]\npermissions: [swap]"
)


async def test_a_tick_stopped_after_the_effect_is_resumed_and_never_fires_twice() -> None:
    clock, hooks, store, tables = ManualClock(), Hooks(), MemoryStore(), MemoryAppTables()
    book = Book()
    effect, forever = asyncio.Event(), asyncio.Event()

    def usd(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(str(args.usd))

    @capability(kind="execute", operation="swap", amount_usd=usd)
    async def buy(asset: str, usd: Decimal) -> dict[str, str]:
        """Buy; the first process stops right after the effect."""
        book.calls.append(("buy", {"asset": asset, "usd": str(usd)}))
        effect.set()
        await forever.wait()
        return {"bought": asset}

    action = {"capability": "buy", "args": {"asset": "ETH", "usd": "5"}}
    hooks.on("dca", "tick", lambda ctx: {"intents": [{"summary": "buy", "action": action}]})
    first = engine(PERMITTED, book=book, hooks=hooks, clock=clock, store=store, tables=tables)
    first.paper["buy"] = buy
    await first.enable("dca")
    for approval in await first.pending("dca"):  # the enabling approval
        await first.approve(approval.approval_id, by="alice")
    await first.enable("dca")
    task = asyncio.create_task(first.step())
    await effect.wait()
    task.cancel()  # the process dies after the effect, before its result is recorded
    await asyncio.gather(task, return_exceptions=True)
    [left] = await tables.ticks("dca")
    assert left.status == "running"

    second = engine(PERMITTED, book=Book(), hooks=hooks, clock=clock, store=store, tables=tables)
    assert [r.outcome for r in await second.step()] == ["taken"]  # not before the lease ends
    clock.advance(31)
    results = await second.step()
    # its outcome is unknown (the effect happened, its result was never recorded): recorded as
    # a failed intent, never retried
    assert results[0].outcome == "error"
    assert results[0].detail == "intent_failed 1"
    assert results[0].slot == left.slot
    assert book.calls == [("buy", {"asset": "ETH", "usd": "5"})]  # never executed twice
    assert hooks.calls[("dca", "tick")] == 1  # the tick was not fired again


async def test_an_agent_of_the_server_never_resumes_an_apps_hook_run() -> None:
    from fiduciary import Agent, RunError
    from fiduciary.testing import allow_all

    clock, hooks, store = ManualClock(), Hooks(), MemoryStore()
    book = Book()
    hooks.on("dca", "tick", lambda ctx: {})
    eng = engine(APP, book=book, hooks=hooks, clock=clock, store=store)
    await eng.enable("dca")
    [result] = await eng.step()
    assert result.run_id is not None
    # same model name, same capabilities but app_state: it must leave the run alone
    other = Agent(
        model=hooks.model(),
        capabilities=book.capabilities(),
        store=store,
        authorize=allow_all,
        clock=clock,
    )
    with pytest.raises(RunError, match="app_state") as caught:
        await other.check_resumable(result.run_id)
    assert caught.value.code == "agent_mismatch"
