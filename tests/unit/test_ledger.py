"""The idempotency ledger: server-made keys, at most one execution per key, recorded results."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from fiduciary import Agent, CallContext, ToolCallEnd, capability
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)


def payment_capability(entries: list[str]) -> Any:
    @capability(
        kind="execute",
        operation="pay",
        amount_usd=lambda args, ctx: Decimal("1"),
        idempotency_key=lambda args, ctx: f"invoice:{args.invoice}",
    )
    async def pay(invoice: str, ctx: CallContext) -> dict[str, str]:
        """Pay an invoice: one payment per invoice id, whatever the run."""
        entries.append(ctx.idempotency_key)
        return {"paid": invoice, "key": ctx.idempotency_key}

    return pay


async def test_custom_key_runs_once_across_runs_and_returns_recorded_result(
    store: Store, clock: ManualClock
) -> None:
    entries: list[str] = []
    script = Script("pay", [ToolCalls([Call("pay", {"invoice": "INV-7"})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[payment_capability(entries)],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    first = await collect(agent.run("pay INV-7", principal="alice"))
    second = await collect(agent.run("pay INV-7 again", principal="alice"))
    assert entries == ["alice:invoice:INV-7"]
    end1 = next(e for e in first if isinstance(e, ToolCallEnd))
    end2 = next(e for e in second if isinstance(e, ToolCallEnd))
    assert end1.recovery is None
    assert end2.recovery == "ledger"
    assert (
        json.loads(end2.output)
        == json.loads(end1.output)
        == {"paid": "INV-7", "key": "alice:invoice:INV-7"}
    )
    entry = await store.ledger_get("alice:invoice:INV-7")
    assert entry is not None
    assert entry.status == "done"
    assert entry.run_id == first[0].run_id


async def test_default_key_is_server_made(store: Store, clock: ManualClock) -> None:
    keys: list[str] = []

    @capability(kind="execute", tier="auto")
    async def act(what: str, ctx: CallContext) -> str:
        """Do something."""
        keys.append(ctx.idempotency_key)
        return "done"

    script = Script(
        "act",
        [ToolCalls([Call("act", {"what": "x", "idempotency_key": "model-chosen"})]), Reply("ok")],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[act],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("act", principal="alice"))
    (key,) = keys
    run_id, tool_use_id, name, version, digest = key.split(":")
    assert run_id == str(events[0].run_id)
    assert tool_use_id == "toolu_000_0"
    assert (name, version) == ("act", "v1")
    assert len(digest) == 64
    assert "model-chosen" not in key


async def test_refused_write_records_failure_and_may_be_attempted_again(
    store: Store, clock: ManualClock
) -> None:
    from fiduciary import CapabilityError

    attempts: list[str] = []

    @capability(kind="execute", tier="auto", idempotency_key=lambda a, c: f"k:{a.n}")
    async def flaky(n: int, ctx: CallContext) -> str:
        """Fails with a clear refusal."""
        attempts.append(ctx.idempotency_key)
        raise CapabilityError("insufficient_funds", "not enough")

    script = Script("flaky", [ToolCalls([Call("flaky", {"n": 1})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[flaky],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    first = await collect(agent.run("flaky", principal="alice"))
    end = next(e for e in first if isinstance(e, ToolCallEnd))
    assert end.is_error
    assert end.error_code == "insufficient_funds"
    entry = await store.ledger_get("alice:k:1")
    assert entry is not None
    assert entry.status == "failed"
    # the refusal is known to have had no effect: a later attempt with the same key runs again
    await collect(agent.run("flaky", principal="alice"))
    assert attempts == ["alice:k:1", "alice:k:1"]


async def test_unknown_outcome_is_never_attempted_again(store: Store, clock: ManualClock) -> None:
    attempts: list[str] = []

    @capability(kind="execute", tier="auto", idempotency_key=lambda a, c: f"k:{a.n}")
    async def crashes(n: int, ctx: CallContext) -> str:
        """Fails after (maybe) having had its effect."""
        attempts.append(ctx.idempotency_key)
        raise ConnectionResetError("lost the connection mid-request")

    script = Script("crash", [ToolCalls([Call("crashes", {"n": 1})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[crashes],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    first = await collect(agent.run("crash", principal="alice"))
    end = next(e for e in first if isinstance(e, ToolCallEnd))
    assert end.error_code == "handler_error"
    assert "unknown" in end.output
    second = await collect(agent.run("crash", principal="alice"))
    end = next(e for e in second if isinstance(e, ToolCallEnd))
    assert attempts == ["alice:k:1"]
    assert end.recovery == "ledger"
    assert end.is_error
