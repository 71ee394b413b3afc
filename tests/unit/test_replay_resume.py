"""Replay ``resume``: a write ledgered like ``never`` whose handler, not the core, settles a
call a crash left started (same idempotency key); done or failed rows are never run again."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from fiduciary import Agent, AuthorizationRequest, CallContext, ToolCallEnd, capability
from fiduciary.exceptions import ConfigurationError
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ToolCalls,
    allow_all,
    collect,
)
from tests.agent_support import make_agent


async def deny_all(request: AuthorizationRequest) -> bool:
    return False


class Crash(BaseException):
    """The process dies inside the handler (nothing after it runs)."""


def transfer_agent(
    store: Store, clock: ManualClock, calls: list[str], *, crash: bool, authorized: bool = True
) -> Agent:
    @capability(kind="execute", replay="resume", tier="auto", flags={"irreversible"})
    async def transfer(to: str, ctx: CallContext) -> dict[str, str]:
        """Move money; settles itself from its own record under the same key."""
        calls.append(ctx.idempotency_key)
        if crash:
            raise Crash
        return {"to": to, "attempts": str(calls.count(ctx.idempotency_key))}

    script = Script("pay", [ToolCalls([Call("transfer", {"to": "bob"})]), Reply("sent")])
    return make_agent(
        None,
        store,
        clock,
        script,
        capabilities=[transfer],
        authorize=allow_all if authorized else deny_all,
        lease_seconds=5,
    )


def test_an_irreversible_write_may_be_resume_but_not_safe() -> None:
    with pytest.raises(ConfigurationError, match="cannot be replay='safe'"):

        @capability(kind="execute", replay="safe", flags={"irreversible"})
        async def unsafe() -> str:
            """No."""
            return "no"


async def test_a_started_resume_call_is_handed_back_to_its_handler_once_then_recorded(
    store: Store, clock: ManualClock
) -> None:
    calls: list[str] = []
    crashing = transfer_agent(store, clock, calls, crash=True)
    with pytest.raises(Crash):
        await collect(crashing.run("pay bob", principal="alice"))
    [run] = await store.list_runs(limit=10)
    entry = await store.ledger_get(calls[0])
    assert entry is not None
    assert entry.status == "started"  # fenced like never: the row was committed first

    clock.advance(timedelta(seconds=6))  # the dead process's lease lapses
    # admitted before it started, it is not admitted again: an authorizer that would now say
    # no (or a policy that would now ask a person) must not disown what may have happened
    agent = transfer_agent(store, clock, calls, crash=False, authorized=False)
    events = await collect(agent.resume(run.run_id))
    end = next(e for e in events if isinstance(e, ToolCallEnd))
    assert not end.is_error
    assert end.recovery == "replayed"
    assert json.loads(end.output.split("\n\n")[0]) == {"to": "bob", "attempts": "2"}
    assert calls == [calls[0], calls[0]]  # the same key both times
    entry = await store.ledger_get(calls[0])
    assert entry is not None
    assert entry.status == "done"
    assert (await agent.get_run(run.run_id)).status == "completed"
