"""A process of ``test_typed_kills.py``: start a run and hang at a suspension point, or resume
it, or play it straight; then print the run's log, normalised, as JSON.

    python typed_child.py start|resume|straight SCENARIO DB RUN_ID MARKER

Scenarios: ``output`` (an invalid ``final_result``, then a valid one), ``output_text`` (a text
answer that is not the type, then a valid call), ``fallback`` (the primary model overloaded,
the secondary answers), ``deps`` (a read through ``ctx.deps``, then another: the deps are
given to ``run``; a resuming process makes them with ``deps_factory``, or has none with
``resume-bare`` and must refuse). In ``start`` the model that would answer next writes
``MARKER`` and waits forever: between the invalid answer and its retry, between the primary's
failure and the secondary's answer, between the two reads. The parent kills the process there
(SIGKILL).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from fiduciary import (
    Agent,
    CallContext,
    ModelError,
    RunError,
    SQLiteStore,
    capability,
    encode_event,
)
from fiduciary.models import FallbackModel
from fiduciary.models.base import AssistantMessage, Model, ModelEvent, ModelRequest
from fiduciary.outputs import OUTPUT_TOOL
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls

LEASE_SECONDS = 1.0  # the dead process's lease lapses within this


class Invoice(BaseModel):
    number: str
    total: Decimal


class Ledger:
    """The application's own object, handed to the capability as deps: never recorded."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.token = SECRET  # what the application holds and the log must never


SECRET = "deps-secret-7c1e9a"


@capability(kind="read")
async def ledger_name(ctx: CallContext[Ledger]) -> str:
    """The name of the application's ledger."""
    assert ctx.deps.token == SECRET
    return f"the ledger of {ctx.deps.where}"


def ledger_for(run_id: UUID, principal: str) -> Ledger:
    return Ledger(f"{principal}'s shop")


class Hanging:
    """``inner``, except that in ``start`` its ``hang_at``-th turn writes the marker and waits
    forever (the process is killed there)."""

    def __init__(self, inner: ScriptedModel, *, hang_at: int, marker: Path | None) -> None:
        self.inner = inner
        self.hang_at = hang_at
        self.marker = marker

    @property
    def name(self) -> str:
        return self.inner.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        turns = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if self.marker is not None and turns == self.hang_at:
            self.marker.write_text("asked")
            await asyncio.Event().wait()  # killed here
        async for event in self.inner.stream(request):
            yield event


class Overloaded:
    name = "primary"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise ModelError("primary is overloaded", code="overloaded", retryable=True)
        yield  # (an async generator)


def build(scenario: str, store: SQLiteStore, marker: Path | None, *, bare: bool = False) -> Agent:
    model: Model
    options: dict[str, Any] = {}
    if scenario == "deps":
        read = ToolCalls([Call("ledger_name")])
        scripted = ScriptedModel([Script("hello", [read, read, Reply("Done.")])])
        model = Hanging(scripted, hang_at=1, marker=marker)
        return Agent(
            model=model,
            capabilities=[ledger_name],
            store=store,
            lease_seconds=LEASE_SECONDS,
            deps_type=Ledger,
            deps_factory=None if bare else ledger_for,
        )
    if scenario == "fallback":
        answer = ScriptedModel(
            [Script("hello", [Reply("Hello, from the secondary.")])], name="secondary"
        )
        model = FallbackModel([Overloaded(), Hanging(answer, hang_at=0, marker=marker)])
    else:
        first = (
            ToolCalls([Call(OUTPUT_TOOL, {"number": "INV-1"})])
            if scenario == "output"
            else Reply("The total is 12.50.")
        )
        valid = ToolCalls([Call(OUTPUT_TOOL, {"number": "INV-1", "total": "12.50"})])
        scripted = ScriptedModel([Script("hello", [first, valid])])
        model = Hanging(scripted, hang_at=1, marker=marker)
        options = {"output_type": Invoice, "output_retries": 2}
    return Agent(model=model, capabilities=[], store=store, lease_seconds=LEASE_SECONDS, **options)


async def main(mode: str, scenario: str, db: Path, run_id: UUID, marker: Path) -> None:
    store = SQLiteStore(db)
    try:
        agent = build(
            scenario, store, marker if mode == "start" else None, bare=mode == "resume-bare"
        )
        if mode == "resume-bare":  # no deps to give: refused, touching nothing
            try:
                await agent.check_resumable(run_id)
            except RunError as exc:
                print(json.dumps({"refused": exc.code, "message": exc.message}))
                return
            print(json.dumps({"refused": None}))
            return
        if mode == "resume":
            await _resume(agent, run_id)
        else:
            deps = Ledger("alice's shop") if scenario == "deps" else None
            async for _ in agent.run("hello", principal="alice", run_id=run_id, deps=deps):
                pass
        events = await store.read_events(run_id)
        logged = []
        for event in events:
            fields = json.loads(encode_event(event))
            for key in ("run_id", "seq", "at"):
                fields.pop(key)
            logged.append(fields)
        run = await store.get_run(run_id)
        output = await agent.output(run_id)
        print(
            json.dumps(
                {
                    "status": run.status if run else None,
                    "output": None if output is None else output.model_dump(mode="json"),
                    "events": logged,
                }
            )
        )
    finally:
        await store.close()


async def _resume(agent: Agent, run_id: UUID) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        try:
            async for _ in agent.resume(run_id):
                pass
            return
        except RunError as exc:
            if exc.code != "busy" or loop.time() > deadline:
                raise
        # the killed process's lease is in wall-clock time: it lapses within LEASE_SECONDS
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    mode_, scenario_, db_, run_id_, marker_ = sys.argv[1:6]
    asyncio.run(main(mode_, scenario_, Path(db_), UUID(run_id_), Path(marker_)))
