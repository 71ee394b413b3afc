"""The loop and the approval API, through the public Agent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel

from fiduciary import (
    Agent,
    ApprovalError,
    CallContext,
    ManualClock,
    PendingAction,
    Policy,
    RunCompleted,
    RunError,
    RunFailed,
    TextDelta,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    capability,
)
from fiduciary.events import ActionResolved, Event, TurnComplete
from fiduciary.models.base import ModelEvent, ModelRequest, StreamStop, StreamToolCall
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    approve_all,
    collect,
)

from .conftest import Effects, make_agent, toy_capabilities

ALICE = "alice"


class Out(BaseModel):
    usd: str


def of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


PAY_TWO = Script(
    "pay two",
    [
        ToolCalls([Call("balance"), Call("rates")]),
        ToolCalls(
            [
                Call("send", {"to": "bob", "amount": "5"}),
                Call("send", {"to": "carol", "amount": "150"}),
                Call("send", {"to": "dave", "amount": "120"}),
            ]
        ),
        Reply(lambda r: f"Done: {r.get('send')}"),
    ],
)


async def test_reads_auto_write_and_pending(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("please pay two people", principal=ALICE))
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1))
    ends = {e.name: e for e in of(events, ToolCallEnd) if e.name != "send"}
    assert json.loads(ends["balance"].output)["usd"] == "250.00"
    pending = of(events, PendingAction)
    assert [p.input["to"] for p in pending] == ["carol", "dave"]
    assert all(p.tier == "confirm" for p in pending)
    assert effects.payments == [{"to": "bob", "amount": Decimal("5"), "memo": ""}]
    run = await agent.get_run(events[0].run_id)
    assert run.status == "awaiting_approval"
    assert run.last_seq == events[-1].seq


async def test_two_writes_approved_in_reverse_order(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("pay two", principal=ALICE))
    run_id = events[0].run_id
    carol, dave = of(events, PendingAction)
    await agent.approve(dave.approval_id, by=ALICE)
    more = await collect(agent.resume(run_id))
    assert [p["to"] for p in effects.payments] == ["bob", "dave"]
    assert (await agent.get_run(run_id)).status == "awaiting_approval"
    assert [e.tool_use_id for e in of(more, ToolCallEnd)] == [dave.tool_use_id]
    await agent.approve(carol.approval_id, by=ALICE, edits={"amount": "140"})
    more = await collect(agent.resume(run_id))
    assert effects.payments[-1] == {"to": "carol", "amount": Decimal("140"), "memo": ""}
    assert isinstance(more[-1], RunCompleted)
    resolved = of(more, ActionResolved)
    assert resolved[0].edits == {"amount": "140"}
    log = await store.read_events(run_id)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))


async def test_denied_call_never_executes(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("pay two", principal=ALICE))
    carol, dave = of(events, PendingAction)
    await agent.deny(carol.approval_id, by=ALICE, reason="wrong person")
    await agent.deny(dave.approval_id, by=ALICE)
    more = await collect(agent.resume(events[0].run_id))
    assert [p["to"] for p in effects.payments] == ["bob"]
    rejected = of(more, ToolCallRejected)
    assert [r.reason for r in rejected] == ["denied", "denied"]
    assert "wrong person" in rejected[0].message
    assert isinstance(more[-1], RunCompleted)
    with pytest.raises(ApprovalError) as err:
        await agent.approve(carol.approval_id, by=ALICE)
    assert err.value.code == "already_decided"
    assert [p["to"] for p in effects.payments] == ["bob"]


async def test_approval_errors_change_nothing(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("pay two", principal=ALICE))
    carol, dave = of(events, PendingAction)
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (uuid4(), {"by": ALICE}, "unknown"),
        (carol.approval_id, {"by": "mallory"}, "forbidden"),
        (carol.approval_id, {"by": ALICE, "edits": {"to": "mallory"}}, "field_not_modifiable"),
        (carol.approval_id, {"by": ALICE, "edits": {"amount": "lots"}}, "invalid_edit"),
        (carol.approval_id, {"by": ALICE, "args_digest": "0" * 64}, "digest_mismatch"),
        (carol.approval_id, {"by": ALICE, "edits": {"amount": "900"}}, "acknowledgement_required"),
    ]
    for approval_id, kwargs, code in cases:
        with pytest.raises(ApprovalError) as err:
            await agent.approve(approval_id, **kwargs)
        assert err.value.code == code, (kwargs, err.value)
    assert [a.status for a in await store.list_approvals()] == ["pending", "pending"]
    # an edit that raises the tier to explicit passes with the amount re-typed
    record = await agent.approve(
        carol.approval_id, by=ALICE, edits={"amount": "900"}, confirm_amount="900.00"
    )
    assert record.tier == "explicit"
    assert record.approved_args is not None
    assert record.approved_args["amount"] == "900"
    with pytest.raises(ApprovalError) as err:
        await agent.approve(carol.approval_id, by=ALICE)
    assert err.value.code == "already_decided"
    # expiry
    clock.advance(Policy().approval_ttl_seconds + 1)
    with pytest.raises(ApprovalError) as err:
        await agent.approve(dave.approval_id, by=ALICE, args_digest=dave.args_digest)
    assert err.value.code == "expired"
    more = await collect(agent.resume(events[0].run_id))
    assert [p["to"] for p in effects.payments] == ["bob", "carol"]
    assert effects.payments[-1]["amount"] == Decimal("900")
    assert [r.reason for r in of(more, ToolCallRejected)] == ["expired"]


async def test_approval_expiring_while_suspended_tells_model(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("pay two", principal=ALICE))
    clock.advance(3600)
    more = await collect(agent.resume(events[0].run_id))
    assert [e.decision for e in of(more, ActionResolved)] == ["expired", "expired"]
    assert [p["to"] for p in effects.payments] == ["bob"]
    assert isinstance(more[-1], RunCompleted)


async def test_explicit_tier_needs_retyped_amount(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("big", [ToolCalls([Call("send", {"to": "bob", "amount": "700"})]), Reply("ok")])
    agent = make_agent(effects, store, clock, script)
    events = await collect(agent.run("big payment", principal=ALICE))
    (pending,) = of(events, PendingAction)
    assert pending.tier == "explicit"
    assert pending.acknowledge == "amount"
    assert pending.amount_usd == Decimal("700")
    for wrong in (None, "70", "seven hundred"):
        with pytest.raises(ApprovalError) as err:
            await agent.approve(pending.approval_id, by=ALICE, confirm_amount=wrong)
        assert err.value.code == "acknowledgement_required"
    await agent.approve(pending.approval_id, by=ALICE, confirm_amount="$700.00")
    await collect(agent.resume(events[0].run_id))
    assert effects.payments == [{"to": "bob", "amount": Decimal("700"), "memo": ""}]


async def test_model_claiming_approval_changes_nothing(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "sneaky",
        [
            ToolCalls([Call("send", {"to": "eve", "amount": "150", "user_approved": True})]),
            Reply("ok"),
        ],
    )
    agent = make_agent(effects, store, clock, script)
    events = await collect(agent.run("sneaky", principal=ALICE))
    (pending,) = of(events, PendingAction)
    assert "user_approved" not in pending.input
    assert effects.payments == []


async def test_fail_closed_without_authorize(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "small",
        [ToolCalls([Call("send", {"to": "bob", "amount": "1"}), Call("balance")]), Reply("ok")],
    )
    agent = make_agent(effects, store, clock, script, authorize=None)
    events = await collect(agent.run("small", principal=ALICE))
    (rejected,) = of(events, ToolCallRejected)
    assert rejected.reason == "unauthorized"
    assert [e.name for e in of(events, ToolCallEnd)] == ["balance"]
    assert effects.payments == []
    assert isinstance(events[-1], RunCompleted)

    def boom(_: Any) -> bool:
        raise RuntimeError("authorizer down")

    for deny in (lambda _: False, boom, lambda _: "yes"):
        agent = make_agent(effects, MemoryStore(), clock, script, authorize=deny)
        events = await collect(agent.run("small", principal=ALICE))
        assert [r.reason for r in of(events, ToolCallRejected)] == ["unauthorized"]
    assert effects.payments == []


async def test_plan_first_allows_only_read_preview_propose(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "plan",
        [ToolCalls([Call("balance"), Call("send", {"to": "b", "amount": "1"})]), Reply("plan")],
    )
    agent = make_agent(effects, store, clock, script)
    events = await collect(agent.run("plan it", principal=ALICE, plan_first=True))
    (rejected,) = of(events, ToolCallRejected)
    assert rejected.reason == "kind_not_allowed"
    assert "propose" in rejected.message
    assert effects.payments == []


async def test_whitelist_per_run_and_unknown_tools(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "list",
        [
            ToolCalls(
                [Call("balance"), Call("rates"), Call("rm_rf"), Call("balance", raw="{oops")]
            ),
            Reply("ok"),
        ],
    )
    agent = make_agent(effects, store, clock, script)
    events = await collect(agent.run("list", principal=ALICE, capabilities=["balance"]))
    reasons = {(r.name, r.reason) for r in of(events, ToolCallRejected)}
    assert reasons == {
        ("rates", "not_allowed"),
        ("rm_rf", "not_allowed"),
        ("balance", "malformed_call"),
    }
    assert [e.name for e in of(events, ToolCallEnd)] == ["balance"]
    with pytest.raises(RunError):
        await collect(agent.run("list", principal=ALICE, capabilities=["nope"]))


async def test_invalid_input_goes_back_to_the_model(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "bad",
        [ToolCalls([Call("send", {"to": "bob"})]), Reply(lambda r: f"error seen: {r.errors}")],
    )
    model = ScriptedModel([script])
    agent = Agent(
        model=model,
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("bad input", principal=ALICE))
    (rejected,) = of(events, ToolCallRejected)
    assert rejected.reason == "invalid_input"
    assert "amount" in rejected.message
    last = model.requests[-1].messages[-1]
    assert "invalid_input" in str(last)
    assert isinstance(events[-1], RunCompleted)


async def test_retry_protection_blocks_identical_irreversible_call(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "twice",
        [
            ToolCalls([Call("send", {"to": "bob", "amount": "2"})]),
            ToolCalls([Call("send", {"to": "bob", "amount": "2"})]),
            Reply("ok"),
        ],
    )
    agent = make_agent(effects, store, clock, script)
    events = await collect(agent.run("twice", principal=ALICE))
    (rejected,) = of(events, ToolCallRejected)
    assert rejected.reason == "guard_blocked"
    assert "retry_protection" in rejected.message
    assert len(effects.payments) == 1


async def test_daily_autonomous_limit(effects: Effects, store: Store, clock: ManualClock) -> None:
    calls = [Call("send", {"to": f"p{i}", "amount": "8"}) for i in range(3)]
    script = Script("many", [ToolCalls(calls), Reply("ok")])
    policy = Policy(daily_autonomous_limit_usd=Decimal("20"))
    agent = make_agent(effects, store, clock, script, policy=policy)
    events = await collect(agent.run("many small", principal=ALICE))
    assert len(effects.payments) == 2
    (pending,) = of(events, PendingAction)
    assert pending.input["to"] == "p2"
    # a new day resets the limit
    clock.advance(86_400)
    events = await collect(agent.run("many small", principal=ALICE))
    assert len(effects.payments) == 4


async def test_policy_deny(effects: Effects, store: Store, clock: ManualClock) -> None:
    script = Script("deny", [ToolCalls([Call("send", {"to": "b", "amount": "1"})]), Reply("ok")])
    agent = make_agent(
        effects, store, clock, script, policy=Policy(deny_operations=frozenset({"send"}))
    )
    events = await collect(agent.run("deny", principal=ALICE))
    assert [r.reason for r in of(events, ToolCallRejected)] == ["policy_denied"]
    assert effects.payments == []


async def test_conversation_continues_on_same_run(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("hello", [Reply("hi"), ToolCalls([Call("balance")]), Reply("250")])
    agent = make_agent(effects, store, clock, script)
    first = await collect(agent.run("hello", principal=ALICE))
    run_id = first[0].run_id
    second = await collect(agent.run("balance?", principal=ALICE, run_id=run_id))
    assert second[0].seq == first[-1].seq + 1
    assert isinstance(second[-1], RunCompleted)
    assert second[-1].text == "250"
    with pytest.raises(RunError) as err:
        await collect(agent.run("hi", principal="mallory", run_id=run_id))
    assert err.value.code == "forbidden"


async def test_max_turns(effects: Effects, store: Store, clock: ManualClock) -> None:
    script = Script("loop", [ToolCalls([Call("rates", {"currency": f"C{i}"})]) for i in range(10)])
    agent = make_agent(effects, store, clock, script, max_turns=3)
    events = await collect(agent.run("loop", principal=ALICE))
    assert isinstance(events[-1], RunFailed)
    assert events[-1].reason == "max_turns"
    assert len(of(events, TurnComplete)) == 3
    assert (await agent.get_run(events[0].run_id)).status == "failed"


async def test_an_agent_with_another_option_applies_it_to_its_next_run(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("loop", [ToolCalls([Call("rates", {"currency": f"C{i}"})]) for i in range(10)])
    agent = make_agent(effects, store, clock, script, max_turns=3)
    assert len(of(await collect(agent.run("loop", principal=ALICE)), TurnComplete)) == 3
    events = await collect(agent.with_options(max_turns=2).run("loop", principal=ALICE))
    assert len(of(events, TurnComplete)) == 2
    assert isinstance(events[-1], RunFailed)
    assert events[-1].message == "stopped after 2 model turns"


async def test_max_tool_calls(effects: Effects, store: Store, clock: ManualClock) -> None:
    script = Script("calls", [ToolCalls([Call("rates")] * 4), Reply("ok")])
    agent = make_agent(effects, store, clock, script, max_tool_calls=2)
    events = await collect(agent.run("calls", principal=ALICE))
    assert [r.reason for r in of(events, ToolCallRejected)] == ["tool_call_limit"] * 2


async def test_timeout_and_truncation(store: Store, clock: ManualClock) -> None:
    release = asyncio.Event()

    @capability(kind="read", timeout=0.05)
    async def slow() -> str:
        """Never finishes in time."""
        await release.wait()
        return "late"

    @capability(kind="read", max_result_chars=100)
    async def big() -> list[int]:
        """Too much data."""
        return list(range(1000))

    script = Script("x", [ToolCalls([Call("slow"), Call("big")]), Reply("ok")])
    agent = Agent(model=ScriptedModel([script]), capabilities=[slow, big], store=store, clock=clock)
    events = await collect(agent.run("x", principal=ALICE))
    ends = {e.name: e for e in of(events, ToolCallEnd)}
    assert ends["slow"].is_error
    assert ends["slow"].error_code == "timeout"
    assert ends["big"].truncated
    assert len(ends["big"].output) < 400
    assert "narrow the request" in ends["big"].output


async def test_reads_run_concurrently_and_start_before_turn_ends(
    store: Store, clock: ManualClock
) -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()
    started_during_stream: list[bool] = []

    @capability(kind="read")
    async def a() -> str:
        """Waits for b."""
        a_started.set()
        await b_started.wait()
        return "a"

    @capability(kind="read")
    async def b() -> str:
        """Waits for a."""
        b_started.set()
        await a_started.wait()
        return "b"

    class Streaming:
        name = "streaming"

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            if len(request.messages) > 1:
                yield StreamStop("end_turn")
                return
            yield StreamToolCall("t1", "a", "{}")
            yield StreamToolCall("t2", "b", "{}")
            await asyncio.wait_for(a_started.wait(), 1)
            started_during_stream.append(True)
            yield StreamStop("tool_use")

    agent = Agent(model=Streaming(), capabilities=[a, b], store=store, clock=clock)
    events = await asyncio.wait_for(collect(agent.run("go", principal=ALICE)), 5)
    assert started_during_stream == [True]
    assert sorted(e.output for e in of(events, ToolCallEnd)) == ['"a"', '"b"']


async def test_handler_errors_are_tool_errors(store: Store, clock: ManualClock) -> None:
    from fiduciary import CapabilityError

    @capability(kind="read")
    async def refuses() -> str:
        """Refuses."""
        raise CapabilityError("insufficient_funds", "only 3 USDC available")

    @capability(kind="read")
    async def crashes() -> str:
        """Crashes with a secret in the message."""
        raise RuntimeError("db password=hunter2 leaked")

    script = Script("x", [ToolCalls([Call("refuses"), Call("crashes")]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]), capabilities=[refuses, crashes], store=store, clock=clock
    )
    events = await collect(agent.run("x", principal=ALICE))
    ends = {e.name: e for e in of(events, ToolCallEnd)}
    assert ends["refuses"].error_code == "insufficient_funds"
    assert "only 3 USDC" in ends["refuses"].output
    assert ends["crashes"].error_code == "handler_error"
    assert "hunter2" not in ends["crashes"].output
    assert isinstance(events[-1], RunCompleted)


async def test_output_validation_drops_extra_fields(store: Store, clock: ManualClock) -> None:
    @capability(kind="read")
    async def quote() -> Out:
        """A quote."""
        return {"usd": "1", "internal_note": "drop me"}  # type: ignore[return-value]

    script = Script("x", [ToolCalls([Call("quote")]), Reply("ok")])
    agent = Agent(model=ScriptedModel([script]), capabilities=[quote], store=store, clock=clock)
    events = await collect(agent.run("x", principal=ALICE))
    (end,) = of(events, ToolCallEnd)
    assert json.loads(end.output) == {"usd": "1"}


async def test_progress_and_context(store: Store, clock: ManualClock) -> None:
    seen: list[CallContext] = []

    @capability(kind="read")
    async def long_job(ctx: CallContext) -> str:
        """Reports progress."""
        seen.append(ctx)
        await ctx.progress("half way", 50.0)
        return "done"

    script = Script("x", [ToolCalls([Call("long_job")]), Reply("ok")])
    agent = Agent(model=ScriptedModel([script]), capabilities=[long_job], store=store, clock=clock)
    events = await collect(agent.run("x", principal=ALICE))
    from fiduciary.events import ToolProgress

    (progress,) = of(events, ToolProgress)
    assert progress.message == "half way"
    assert progress.pct == 50.0
    assert seen[0].run_id == events[0].run_id
    assert seen[0].principal.actor_id == ALICE
    assert seen[0].tool_use_id == of(events, ToolCallStart)[0].tool_use_id


async def test_model_failure_fails_run_cleanly(store: Store, clock: ManualClock) -> None:
    class Broken:
        name = "broken"

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            yield StreamToolCall("t", "x", "{}")
            raise ConnectionError("upstream reset; key=sk-ant-api03-abcdefghijklmnopqrstuvwxyz")

    agent = Agent(model=Broken(), capabilities=[], store=store, clock=clock)
    events = await collect(agent.run("x", principal=ALICE))
    assert events[-2].type == "turn_retracted"
    assert isinstance(events[-1], RunFailed)
    assert events[-1].reason == "error"
    assert "sk-ant" not in events[-1].message


async def test_approve_all_helper_and_text_stream(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY_TWO)
    events = await collect(agent.run("pay two", principal=ALICE))
    more = await approve_all(agent, events[0].run_id, by=ALICE)
    final = more[-1]
    assert isinstance(final, RunCompleted)
    text = "".join(e.text for e in of(more, TextDelta))
    assert text == final.text
    assert text.startswith("Done:")
    assert {p["to"] for p in effects.payments} == {"bob", "carol", "dave"}


async def test_a_resumed_run_is_running_while_driven(store: Store, clock: ManualClock) -> None:
    statuses: list[str] = []

    @capability(kind="execute", tier="confirm")
    async def act(ctx: CallContext) -> str:
        """Act (and look at the run's status meanwhile)."""
        run = await store.get_run(ctx.run_id)
        assert run is not None
        statuses.append(run.status)
        return "done"

    script = Script("act", [ToolCalls([Call("act")]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[act],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("act now", principal=ALICE))
    (pending,) = of(events, PendingAction)
    await agent.approve(pending.approval_id, by=ALICE)
    await collect(agent.resume(events[0].run_id))
    # a crash inside the handler leaves a run resume_all can find
    assert statuses == ["running"]
    assert (await agent.get_run(events[0].run_id)).status == "completed"


async def test_edited_arguments_are_authorized_again(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    def at_most_200(request: Any) -> bool:
        return bool(Decimal(request.args["amount"]) <= 200)

    agent = make_agent(effects, store, clock, PAY_TWO, authorize=at_most_200)
    events = await collect(agent.run("pay two", principal=ALICE))
    carol, _ = of(events, PendingAction)
    with pytest.raises(ApprovalError) as err:
        await agent.approve(
            carol.approval_id, by=ALICE, edits={"amount": "900"}, confirm_amount="900"
        )
    assert err.value.code == "invalid_edit"
    assert (await store.get_approval(carol.approval_id)).status == "pending"  # type: ignore[union-attr]


async def test_a_sync_handler_that_times_out_is_told_to_stop(
    store: Store, clock: ManualClock
) -> None:
    import threading

    stopped = threading.Event()

    @capability(kind="read", timeout=0.05)
    def crunch(ctx: CallContext) -> str:
        """A blocking computation that checks for cancellation."""
        if ctx.cancelled.wait(timeout=5):  # set by the runtime when the call times out
            stopped.set()
        return "late"

    script = Script("crunch", [ToolCalls([Call("crunch")]), Reply("ok")])
    agent = Agent(model=ScriptedModel([script]), capabilities=[crunch], store=store, clock=clock)
    events = await collect(agent.run("crunch", principal=ALICE))
    (end,) = of(events, ToolCallEnd)
    assert end.error_code == "timeout"
    assert await asyncio.to_thread(stopped.wait, 5)


async def test_numbers_from_the_model_stay_exact(store: Store, clock: ManualClock) -> None:
    seen: list[Decimal] = []

    @capability(kind="read")
    async def record(amount: Decimal) -> str:
        """Records an amount."""
        seen.append(amount)
        return "ok"

    script = Script("exact", [ToolCalls([Call("record", raw='{"amount": 0.1}')]), Reply("ok")])
    agent = Agent(model=ScriptedModel([script]), capabilities=[record], store=store, clock=clock)
    await collect(agent.run("exact", principal=ALICE))
    assert seen == [Decimal("0.1")]  # not Decimal(0.1) == 0.1000000000000000055511151231...
