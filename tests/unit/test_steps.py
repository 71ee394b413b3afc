"""Calls made of steps (fiduciary.steps): one card lists every step, one approval covers them,
each step runs once through the ledger, and the first failure stops the rest with an honest
report (nothing undone)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from fiduciary import CallContext, capability
from fiduciary.events import PendingAction, ToolCallEnd
from fiduciary.exceptions import CapabilityError, ConfigurationError
from fiduciary.steps import Step, StepsReport, run_steps
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect
from tests.agent_support import make_agent

pytestmark = pytest.mark.timeout(30)

done: list[str] = []


def plan(args: Any, ctx: CallContext) -> list[Step]:
    def pay(key: str, earlier: list[Any]) -> dict[str, str]:
        done.append(f"pay {key}")
        return {"paid": str(args.amount)}

    def fee(key: str, earlier: list[Any]) -> dict[str, str]:
        if args.amount > 100:
            raise CapabilityError("insufficient_funds", "no money left for the fee")
        done.append(f"fee {key} after {earlier[0]['paid']}")
        return {"fee": "1"}

    def note(key: str, earlier: list[Any]) -> str:
        done.append(f"note {key}")
        return "noted"

    return [
        Step("send", f"Pay {args.amount} USD", pay, "USD", args.amount, keyed=True),
        Step("fee", "Pay the 1 USD fee", fee, "USD", Decimal(1)),
        Step("note", "Write it down", note),
    ]


@capability(
    kind="execute",
    risk="medium",
    operation="send",
    amount_usd=lambda args, ctx: Decimal(args.amount),
    replay="resume",
    steps=plan,
)
async def pay_in_steps(amount: Decimal, ctx: CallContext) -> StepsReport:
    """Pay, then the fee, then note it: three steps."""
    return await run_steps(ctx, plan(_Args(amount), ctx))


class _Args:
    def __init__(self, amount: Decimal) -> None:
        self.amount = amount


def script(amount: str) -> Script:
    return Script(
        f"pay {amount}",
        [ToolCalls([Call("pay_in_steps", {"amount": amount})]), Reply("Done.")],
    )


async def approved_run(store: Store, amount: str) -> tuple[PendingAction, StepsReport, str]:
    agent = make_agent(None, store, None, script(amount), capabilities=[pay_in_steps])
    events = await collect(agent.run(f"pay {amount}", principal="ann"))
    (card,) = [e for e in events if isinstance(e, PendingAction)]
    typed = card.amount_usd if card.tier == "explicit" else None
    await agent.approve(card.approval_id, by="ann", confirm_amount=typed)
    events = await collect(agent.resume(card.run_id))
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    report = StepsReport.model_validate_json(end.output.split("\n")[0])
    return card, report, end.output


async def test_one_card_one_approval_every_step_once(store: Store) -> None:
    done.clear()
    card, report, _ = await approved_run(store, "40")
    assert [(s.operation, s.amount) for s in card.steps or []] == [
        ("send", Decimal(40)),
        ("fee", Decimal(1)),
        ("note", None),
    ]
    assert report.completed is True
    assert [s.status for s in report.steps] == ["done", "done", "done"]
    assert [d.split(" ")[0] for d in done] == ["pay", "fee", "note"]
    keys = [d.split(" ")[1] for d in done]
    assert [k.rsplit(":", 1)[1] for k in keys] == ["step1", "step2", "step3"]
    for key in keys:  # each step's own ledger row
        row = await store.ledger_get(key)
        assert row is not None
        assert row.status == "done"
    assert "after 40" in done[1]  # a step sees the earlier steps' results


async def test_the_first_failure_stops_the_rest_and_nothing_is_undone(store: Store) -> None:
    done.clear()
    _, report, output = await approved_run(store, "500")
    assert report.completed is False
    assert [s.status for s in report.steps] == ["done", "failed", "not_run"]
    assert report.steps[1].error == "no money left for the fee"
    assert [d.split(" ")[0] for d in done] == ["pay"]  # the payment stays; no note
    assert "Nothing was undone" in report.summary
    assert "step 3 (Write it down): not run" in output


def test_a_call_made_of_steps_must_settle_a_crash_itself() -> None:
    with pytest.raises(ConfigurationError, match="replay='resume'"):

        @capability(kind="execute", steps=plan)
        async def unsafe(amount: Decimal) -> str:
            """Steps without replay resume."""
            return "no"
