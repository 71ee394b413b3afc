"""A hung ``authorize`` is a refusal, not a wait that blocks every write of the principal."""

from __future__ import annotations

import asyncio

import pytest

from fiduciary import (
    Agent,
    AuthorizationRequest,
    ConfigurationError,
    ManualClock,
    RunCompleted,
    ToolCallRejected,
)
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect

from .conftest import Effects, toy_capabilities

pytestmark = pytest.mark.timeout(60)  # without the timeout under test, the run hangs


async def test_an_authorizer_that_never_answers_refuses_and_frees_the_principal(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    never = asyncio.Event()
    asked: list[str] = []

    async def authorize(request: AuthorizationRequest) -> bool:
        asked.append(request.capability.name)
        if len(asked) == 1:
            await never.wait()  # the policy service hangs on the first question
        return True

    script = Script(
        "pay",
        [ToolCalls([Call("send", {"to": "bob", "amount": "5"})]), Reply("reported")],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=authorize,
        authorize_timeout=0.05,
    )
    events = await collect(agent.run("pay bob", principal="alice"))
    (rejected,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "unauthorized"
    assert isinstance(events[-1], RunCompleted)
    assert effects.payments == []
    audit = await store.audit_records(events[0].run_id)
    assert [a.outcome for a in audit] == ["rejected:unauthorized"]
    # the principal's next write is not held up behind the hung one
    again = await collect(agent.run("pay bob", principal="alice"))
    assert isinstance(again[-1], RunCompleted)
    assert effects.payments == [{"to": "bob", "amount": 5, "memo": ""}]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_authorize_timeout_must_be_positive(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="authorize_timeout"):
        Agent(model=ScriptedModel([]), capabilities=[], authorize_timeout=bad)
