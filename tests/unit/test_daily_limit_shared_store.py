"""One store, any number of agents: the daily autonomous limit holds however a store is shared.

Each Agent has its own process-local principal lock, so two Agent objects on one store run the
same principal's writes at the same time. The limit must still hold: the spend is reserved in the
store, in one transaction with the check, before the write runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, CallContext, ManualClock, Policy, Threshold, capability
from fiduciary.capabilities import Capability
from fiduciary.events import Event, PendingAction, ToolCallEnd
from fiduciary.stores.base import Store
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, allow_all
from tests.agent_support import make_agent

pytestmark = pytest.mark.timeout(60)

LIMIT = Decimal("100")
FIRST = Decimal("60")  # spent before the race
EACH = Decimal("30")  # each is auto on its own, and 60 + 30 fits the limit; 60 + 30 + 30 does not


class Bank:
    """A payment of ``EACH`` waits until both racing calls are decided (run, or wait for a
    person), so that when both were admitted they are in flight at once."""

    def __init__(self) -> None:
        self.sent: list[Decimal] = []
        self.decided = 0
        self.changed = asyncio.Condition()

    async def decide(self) -> None:
        async with self.changed:
            self.decided += 1
            self.changed.notify_all()

    def capabilities(self) -> list[Capability]:
        @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
        async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
            """Send money."""
            if Decimal(amount) == EACH:
                await self.decide()
                async with self.changed:
                    await self.changed.wait_for(lambda: self.decided >= 2)
            self.sent.append(Decimal(amount))
            return {"to": to}

        return [send]


def spending_agent(store: Store, bank: Bank) -> Agent:
    def pay(amount: Decimal) -> Script:
        steps: list[ToolCalls | Reply] = [
            ToolCalls([Call("send", {"to": "bob", "amount": str(amount)})]),
            Reply("done"),
        ]
        return Script(f"pay {amount}", steps)

    return make_agent(
        store=store,
        model=ScriptedModel([pay(FIRST), pay(EACH)]),
        capabilities=bank.capabilities(),
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(70), confirm_below=Decimal(1000))},
            daily_autonomous_limit_usd=LIMIT,
        ),
    )


async def run(agent: Agent, text: str, bank: Bank) -> list[Event]:
    events = []
    async for event in agent.run(text, principal="alice"):
        events.append(event)
        if isinstance(event, PendingAction):
            await bank.decide()
    return events


Opener = Callable[[Path], Awaitable[list[Store]]]


async def _one_sqlite_store(path: Path) -> list[Store]:
    from fiduciary.stores.sqlite import SQLiteStore

    store = await SQLiteStore.open(path / "runs.sqlite3")
    return [store, store]


async def _sqlite_store_each(path: Path) -> list[Store]:
    from fiduciary.stores.sqlite import SQLiteStore

    return [await SQLiteStore.open(path / "runs.sqlite3") for _ in range(2)]


async def _one_memory_store(path: Path) -> list[Store]:
    store = MemoryStore()
    return [store, store]


@pytest.fixture(
    params=[_one_sqlite_store, _sqlite_store_each, _one_memory_store],
    ids=["sqlite-one-store", "sqlite-store-each", "memory-one-store"],
)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Store]]:
    opener: Opener = request.param
    opened = await opener(tmp_path)
    yield opened
    for store in {id(s): s for s in opened}.values():
        await store.close()


async def test_two_agents_on_one_store_keep_the_daily_limit(stores: list[Store]) -> None:
    bank = Bank()
    first, second = (spending_agent(store, bank) for store in stores)
    await run(first, f"pay {FIRST}", bank)

    logs = await asyncio.gather(run(first, f"pay {EACH}", bank), run(second, f"pay {EACH}", bank))

    assert sum(bank.sent) <= LIMIT
    assert bank.sent == [FIRST, EACH]
    (waiting,) = [e for log in logs for e in log if isinstance(e, PendingAction)]
    assert waiting.tier == "confirm"
    # the card says why this one waits for a person
    assert any("daily autonomous limit" in note.message for note in waiting.guard_notes)
    spent = await stores[1].autonomous_spend("alice", since=Policy.day_start(first.clock.now()))
    assert spent == FIRST + EACH


# --- a reservation turns into spend, or is given back ----------------------------------------
class Flaky:
    """The first payment fails in the given way; the others succeed."""

    def __init__(self, failure: Exception) -> None:
        self.failure: Exception | None = failure
        self.sent: list[Decimal] = []

    def capabilities(self) -> list[Capability]:
        @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
        async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
            """Send money."""
            failure, self.failure = self.failure, None
            if failure is not None:
                raise failure
            self.sent.append(Decimal(amount))
            return {"to": to}

        return [send]


def two_payments_agent(store: Store, flaky: Flaky) -> Agent:
    calls = [Call("send", {"to": f"p{i}", "amount": str(FIRST)}) for i in range(2)]
    return Agent(
        model=ScriptedModel([Script("pay twice", [ToolCalls(calls), Reply("done")])]),
        capabilities=flaky.capabilities(),
        store=store,
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(70), confirm_below=Decimal(1000))},
            daily_autonomous_limit_usd=LIMIT,
        ),
        authorize=allow_all,
    )


async def test_a_payment_refused_before_any_effect_gives_its_reservation_back(
    stores: list[Store],
) -> None:
    from fiduciary import CapabilityError

    flaky = Flaky(CapabilityError("insufficient_funds", "not enough money"))
    agent = two_payments_agent(stores[0], flaky)
    events = [e async for e in agent.run("pay twice", principal="alice")]

    assert flaky.sent == [FIRST]  # the second 60 fits: the refused one spent nothing
    assert not [e for e in events if isinstance(e, PendingAction)]
    spent = await stores[0].autonomous_spend("alice", since=Policy.day_start(agent.clock.now()))
    assert spent == FIRST


async def test_a_payment_with_an_unknown_outcome_keeps_counting(stores: list[Store]) -> None:
    flaky = Flaky(RuntimeError("the bank hung up"))  # it may have paid
    agent = two_payments_agent(stores[0], flaky)
    events = [e async for e in agent.run("pay twice", principal="alice")]

    assert flaky.sent == []
    (waiting,) = [e for e in events if isinstance(e, PendingAction)]  # 60 + 60 > 100
    assert waiting.tier == "confirm"
    spent = await stores[0].autonomous_spend("alice", since=Policy.day_start(agent.clock.now()))
    assert spent == FIRST


# --- a crash between the reservation and the end of the write --------------------------------
class Crash(BaseException):
    """The process dies inside the handler (nothing below catches a BaseException)."""


def crashing_agent(
    store: Store, clock: ManualClock, sent: list[Decimal], crashes: list[bool], replay: str
) -> Agent:
    @capability(
        kind="execute",
        operation="send",
        replay=replay,
        amount_usd=lambda a, c: Decimal(a.amount),
    )
    async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
        """Send money."""
        sent.append(Decimal(amount))
        if crashes and crashes.pop():
            raise Crash
        return {"to": to}

    def pay(amount: Decimal) -> Script:
        steps: list[ToolCalls | Reply] = [
            ToolCalls([Call("send", {"to": "bob", "amount": str(amount)})]),
            Reply("done"),
        ]
        return Script(f"pay {amount}", steps)

    return Agent(
        model=ScriptedModel([pay(FIRST), pay(EACH)]),
        capabilities=[send],
        store=store,
        clock=clock,
        lease_seconds=5,
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(70), confirm_below=Decimal(1000))},
            daily_autonomous_limit_usd=LIMIT,
        ),
        authorize=allow_all,
    )


async def crash_then_resume(store: Store, replay: str) -> tuple[Agent, list[Decimal], Any]:
    clock = ManualClock(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
    sent: list[Decimal] = []
    crashes = [True]  # the first payment's process dies inside the handler
    first = crashing_agent(store, clock, sent, crashes, replay)
    run_ids: list[Any] = []

    async def drive() -> None:
        async for event in first.run(f"pay {FIRST}", principal="alice"):
            run_ids.append(event.run_id)

    with pytest.raises(Crash):
        await drive()
    clock.advance(10)  # the dead process's lease has lapsed
    second = crashing_agent(store, clock, sent, crashes, replay)
    resumed = [e async for e in second.resume(run_ids[0])]
    return second, sent, resumed


async def test_a_write_replayed_after_a_crash_is_counted_once(stores: list[Store]) -> None:
    agent, sent, resumed = await crash_then_resume(stores[0], "safe")

    assert sent == [FIRST, FIRST]  # a safe write runs again, under its first reservation
    assert not [e for e in resumed if isinstance(e, PendingAction)]
    since = Policy.day_start(agent.clock.now())
    assert await stores[0].autonomous_spend("alice", since=since) == FIRST


async def test_a_write_whose_outcome_a_crash_made_unknown_keeps_counting(
    stores: list[Store],
) -> None:
    agent, sent, resumed = await crash_then_resume(stores[0], "never")
    assert sent == [FIRST]  # never run twice: the model is told the outcome is unknown
    assert [e.recovery for e in resumed if isinstance(e, ToolCallEnd)] == ["unknown"]

    # it may have paid: the rest of the day's limit is what is left after it (60 + 60 > 100)
    events = [e async for e in agent.run(f"pay {FIRST}", principal="alice")]
    (waiting,) = [e for e in events if isinstance(e, PendingAction)]
    assert any("daily autonomous limit" in note.message for note in waiting.guard_notes)
    assert sent == [FIRST]
