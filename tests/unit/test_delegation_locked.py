"""A delegate call left open before its child run was created (the parent's process died in
between) starts the child when the parent is resumed, while the parent settles its open calls
under the principal's lock: the child is not driven under that lock (its own writes take it,
across processes on PostgreSQL), it is driven after, and both complete."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from fiduciary import Agent, ManualClock, Policy, capability
from fiduciary.delegation import DelegateResult, child_run_id
from fiduciary.events import Event, RunCompleted, ToolCallEnd, TurnComplete
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls, allow_all
from tests.postgres_support import open_postgres


async def open_store(backend: str, tmp_path: Path) -> Store:
    if backend == "postgres":
        return await open_postgres(tmp_path)
    return await SQLiteStore.open(tmp_path / "runs.sqlite3")


def pair(store: Store, done: list[str]) -> Agent:
    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    async def pay(usd: str) -> dict[str, str]:
        """Pay an invoice."""
        done.append(usd)
        return {"paid": usd}

    def relaying(results: Results) -> str:
        return f"the worker said: {results['delegate']['text']}"

    options: dict[str, Any] = {
        "store": store,
        "clock": ManualClock(),
        "authorize": allow_all,
        "policy": Policy(preset="balanced", daily_autonomous_limit_usd=None),
    }
    worker = Agent(
        model=ScriptedModel(
            [Script("invoice", [ToolCalls([Call("pay", {"usd": "3"})]), Reply("paid $3")])]
        ),
        capabilities=[pay],
        **options,
    )
    task = {"agent": "worker", "task": "pay the invoice"}
    return Agent(
        model=ScriptedModel(
            [Script("settle", [ToolCalls([Call("delegate", task)]), Reply(relaying)])]
        ),
        capabilities=[pay],
        delegates={"worker": worker},
        **options,
    )


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_a_child_started_while_settling_is_driven_after_the_lock(
    backend: str, tmp_path: Path
) -> None:
    store, done = await open_store(backend, tmp_path), list[str]()
    try:
        manager = pair(store, done)
        finished = [e async for e in manager.run("settle my invoice", principal="alice")]
        assert done == ["3"]
        # the same run as its process died after its delegate call was recorded, before the
        # child was created: a copy of its log up to its first turn, under a new id
        cut = next(i for i, e in enumerate(finished) if isinstance(e, TurnComplete))
        run_id = uuid4()
        copied: list[Event] = [e.model_copy(update={"run_id": run_id}) for e in finished[: cut + 1]]
        original = await store.get_run(finished[0].run_id)
        assert original is not None
        record = original.with_(
            run_id=run_id,
            status="running",
            last_seq=0,
            epoch=0,
            lease_owner=None,
            lease_until=None,
        )
        await store.create_run(record, copied)
        child = child_run_id(run_id, "toolu_000_0")
        assert await store.get_run(child) is None

        async with asyncio.timeout(30):  # a child driven under its parent's lock would hang
            await manager.resume_all()
        events = await store.read_events(run_id)
        ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
        assert len(ends) == 1
        assert DelegateResult.model_validate_json(ends[0].output).text == "paid $3"
        assert isinstance(events[-1], RunCompleted)
        assert events[-1].text == "the worker said: paid $3"
        assert done == ["3", "3"]  # the copy's child paid once, as a child of its own
        child_run = await store.get_run(child)
        assert child_run is not None
        assert child_run.status == "completed"
    finally:
        await store.close()
