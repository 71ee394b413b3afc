"""One approver in a process of its own (``test_dual_control_processes``): waits for the
word on stdin, approves, resumes the run, and writes each execution to a file."""

from __future__ import annotations

import asyncio
import os
import sys
from decimal import Decimal
from pathlib import Path
from uuid import UUID

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.dual_control import DualControl
from fiduciary.exceptions import ApprovalError, RunError
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from tests.agent_support import make_agent

FINANCE = DualControl(
    "finance", frozenset({"alice", "bob", "carol"}), required=2, at_or_above_usd=Decimal(100)
)
SCRIPT = Script("send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")])


def capabilities(executions: Path) -> list[Capability]:
    @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
    async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
        """Send money."""
        with executions.open("a", encoding="utf-8") as out:  # O_APPEND: one line per entry
            out.write(f"{ctx.idempotency_key}\n")
        return {"to": to}

    return [send]


def dual_control_agent(store: Store, executions: Path) -> Agent:
    return make_agent(
        store=store,
        model=ScriptedModel([SCRIPT]),
        capabilities=capabilities(executions),
        policy=Policy(dual_control=[FINANCE]),
    )


async def main(dsn: str, approval_id: str, approver: str, executions: str) -> None:
    from fiduciary.stores.postgres import PostgresStore

    store = await PostgresStore.open(dsn)
    try:
        agent = dual_control_agent(store, Path(executions))
        print("ready", flush=True)
        sys.stdin.readline()  # the barrier: both approvers go at once
        try:
            decided = await agent.approve(UUID(approval_id), by=approver)
            print(f"voted {decided.status}", flush=True)
        except ApprovalError as exc:
            print(f"refused {exc.code}", flush=True)
        try:
            await collect(agent.resume(decided.run_id))
        except RunError as exc:  # the other process drives it
            print(f"resume {exc.code}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))


def factory(store: Store) -> Agent:
    """``--agent tests.unit.dual_control_voter:factory`` (the CLI's agent factory)."""
    return dual_control_agent(store, Path(os.devnull))
