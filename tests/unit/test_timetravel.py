"""Time travel (fiduciary.observability): replay, fork and diff of recorded runs."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, CallContext, ManualClock, capability
from fiduciary.capabilities import Capability
from fiduciary.events import (
    ActionResolved,
    Event,
    PendingAction,
    RunCompleted,
    RunStarted,
    ToolCallEnd,
    ToolCallStart,
    encode_event,
)
from fiduciary.exceptions import RunError
from fiduciary.observability import diff, fork, render_diff, replay
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .conftest import Effects, make_agent

ALICE = "alice"

PAY = Script(
    "pay bob",
    [
        ToolCalls([Call("balance"), Call("rates")]),
        ToolCalls([Call("send", {"to": "bob", "amount": "150"})]),
        Reply(lambda r: f"Done: {r.get('send')}"),
    ],
)
SMALL = Script(
    "tip bob",
    [
        ToolCalls([Call("balance")]),
        ToolCalls([Call("send", {"to": "bob", "amount": "5"})]),
        Reply(lambda r: f"Tipped: {r.get('send')}"),
    ],
)


def _no_effects(entered: list[str]) -> list[Capability]:
    """The toy capabilities' shapes, whose handlers must never be entered: a replay answers
    reads from the recording and never executes a write."""

    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance of an account, in USD."""
        entered.append("balance")
        pytest.fail("a replay ran a recorded read live")

    @capability(kind="read")
    async def rates(currency: str = "EUR") -> dict[str, str]:
        """The exchange rate of a currency to USD."""
        entered.append("rates")
        pytest.fail("a replay ran a recorded read live")

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(str(args.amount))

    @capability(
        kind="execute",
        risk="high",
        operation="send",
        amount_usd=amount,
        flags={"irreversible", "mutating"},
        modifiable_fields=["amount", "memo"],
    )
    async def send(to: str, amount: Decimal, memo: str = "") -> dict[str, Any]:
        """Send USD to a recipient."""
        entered.append("send")
        pytest.fail("a replay entered a write handler")

    return [balance, rates, send]


async def _approved_run(agent: Agent) -> UUID:
    """A run whose write waited for a person, who approved it; it completed."""
    events = await collect(agent.run("please pay bob", principal=ALICE))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.approve(pending.approval_id, by=ALICE, confirm_amount=pending.amount_usd)
    await collect(agent.resume(pending.run_id))
    assert (await agent.get_run(pending.run_id)).status == "completed"
    return pending.run_id


def _of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_replay_never_enters_a_handler_and_answers_reads_from_the_recording(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    original = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(original)
    assert len(effects.payments) == 1
    before = [encode_event(e) for e in await store.read_events(run_id)]

    entered: list[str] = []
    host = make_agent(effects, store, clock, PAY, capabilities=_no_effects(entered))
    rid = await replay(host, run_id)

    assert entered == []
    assert len(effects.payments) == 1  # nothing executed again
    events = await store.read_events(rid)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.replay_of == run_id
    assert (await store.get_run(rid)).status == "completed"  # type: ignore[union-attr]
    recorded = {e.name: e.output for e in _of(await store.read_events(run_id), ToolCallEnd)}
    ends = {e.name: e for e in _of(events, ToolCallEnd)}
    assert ends["balance"].output == recorded["balance"]
    assert ends["rates"].output == recorded["rates"]
    sent, _ = json.JSONDecoder().raw_decode(ends["send"].output)  # guard hints follow it
    assert sent["not_executed"] == "replay"
    called = sent["would_have_called"]
    assert called["name"] == "send"
    assert called["arguments"] == {"to": "bob", "amount": "150", "memo": ""}
    assert called["tier"] == "confirm"  # what the original policy gave it: a person was asked
    assert called["amount_usd"] == "150"
    recorded_send, _ = json.JSONDecoder().raw_decode(recorded["send"])
    assert {k: sent[k] for k in recorded_send} == recorded_send  # what the original got
    assert _of(events, PendingAction) == []  # nothing in a replay needs a person
    assert [encode_event(e) for e in await store.read_events(run_id)] == before


async def test_a_read_the_recording_lacks_is_refused_unless_live_reads(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    original = make_agent(effects, store, clock, SMALL)
    run_id = (await collect(original.run("tip bob", principal=ALICE)))[0].run_id
    other = ScriptedModel(
        [
            Script(
                "tip bob",
                [ToolCalls([Call("balance", {"account": "savings"})]), Reply("checked")],
            )
        ],
        name="scripted-b",
    )
    rid = await replay(original, run_id, model=other)
    (end,) = _of(await store.read_events(rid), ToolCallEnd)
    assert end.is_error
    assert end.error_code == "not_recorded"

    live = await replay(original, run_id, model=other, live_reads=True)
    (end,) = _of(await store.read_events(live), ToolCallEnd)
    assert not end.is_error
    assert "savings" in end.output


async def test_a_replay_with_another_model_diverges_and_diff_names_where(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    original = make_agent(effects, store, clock, SMALL)
    run_id = (await collect(original.run("tip bob", principal=ALICE)))[0].run_id
    assert len(effects.payments) == 1
    other = ScriptedModel(
        [
            Script(
                "tip bob",
                [
                    ToolCalls([Call("balance")]),
                    ToolCalls([Call("send", {"to": "bob", "amount": "7"})]),
                    Reply("Tipped seven."),
                ],
            )
        ],
        name="scripted-b",
    )
    rid = await replay(original, run_id, model=other)
    assert len(effects.payments) == 1

    same = await diff(store, run_id, run_id)
    assert same.same
    assert "do not diverge" in render_diff(same)
    found = await diff(store, run_id, rid)
    assert not found.same
    assert found.first is not None
    assert found.first.a is not None
    assert found.first.b is not None
    assert found.first.a["type"] == found.first.b["type"] == "tool_call_start"
    assert found.first.a["input"] == {"to": "bob", "amount": "5", "memo": ""}
    assert found.first.b["input"] == {"to": "bob", "amount": "7", "memo": ""}
    ((index, call_a, call_b),) = found.differing_calls
    assert index == 1
    assert call_a is not None
    assert call_b is not None
    assert (call_a.outcome, call_b.outcome) == ("ok", "not_executed")
    assert found.final_b == "Tipped seven."
    text = render_diff(found)
    assert "first divergence" in text
    assert '"amount":"7"' in text


async def test_a_fork_denying_instead_executes_nothing_and_completes(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(agent)
    assert len(effects.payments) == 1
    original = await store.read_events(run_id)
    before = [encode_event(e) for e in original]
    (pending,) = _of(original, PendingAction)

    rid = await fork(agent, run_id, pending.seq, decide="deny", reason="not today")

    assert len(effects.payments) == 1  # the denied send never ran
    assert (await agent.get_run(rid)).status == "completed"
    events = await store.read_events(rid)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert (started.fork_of, started.fork_at) == (run_id, pending.seq)
    assert (await agent.get_run(rid)).title.startswith(f"FORK of {str(run_id)[:8]} at seq")
    assert [e.type for e in events[: pending.seq]] == [e.type for e in original[: pending.seq]]
    (resolved,) = _of(events, ActionResolved)
    assert resolved.decision == "denied"
    assert resolved.approval_id != pending.approval_id
    assert isinstance(events[-1], RunCompleted)
    assert [encode_event(e) for e in await store.read_events(run_id)] == before
    assert (await agent.get_run(run_id)).status == "completed"


async def test_a_fork_is_a_real_run_durable_and_resumable(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(agent)
    (pending,) = _of(await store.read_events(run_id), PendingAction)

    rid = await fork(agent, run_id, pending.seq)  # no decision: it waits, as the original did
    assert (await agent.get_run(rid)).status == "awaiting_approval"
    (waiting,) = await agent.pending_approvals(run_id=rid)
    assert waiting.approval_id != pending.approval_id

    # another process (a new agent on the same store) decides and drives it on
    later = make_agent(effects, store, clock, PAY)
    await later.approve(waiting.approval_id, by=ALICE, confirm_amount=waiting.amount_usd)
    await collect(later.resume(rid))
    assert (await later.get_run(rid)).status == "completed"
    assert len(effects.payments) == 2  # a fork's approved write executes: it is a real run
    assert effects.entries[0] != effects.entries[1]  # under the fork's own ledger key


async def test_fork_refuses_cuts_it_cannot_continue_from(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(agent)
    events = await store.read_events(run_id)
    inside_turn = _of(events, ToolCallStart)[0].seq
    with pytest.raises(RunError, match="inside a model turn") as exc:
        await fork(agent, run_id, inside_turn)
    assert exc.value.code == "invalid"
    with pytest.raises(RunError, match="the run's end"):
        await fork(agent, run_id, events[-1].seq)
    with pytest.raises(RunError, match="no approval is pending"):
        await fork(agent, run_id, 2, decide="approve")
    with pytest.raises(RunError, match="--at must be a seq from 2"):
        await fork(agent, run_id, events[-1].seq + 5)
    assert len(await store.list_runs()) == 1  # nothing was created


async def test_a_fork_from_the_first_message_runs_again(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, SMALL, authorize=allow_all)
    run_id = (await collect(agent.run("tip bob", principal=ALICE)))[0].run_id
    rid = await fork(agent, run_id, 2)
    assert (await agent.get_run(rid)).status == "completed"
    assert len(effects.payments) == 2


async def test_a_fork_after_a_turn_dispatches_its_calls_again_through_the_gates(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(agent)
    events = await store.read_events(run_id)
    (pending,) = _of(events, PendingAction)
    turn_end = max(e.seq for e in events if e.type == "turn_complete" and e.seq < pending.seq)

    rid = await fork(agent, run_id, turn_end)

    assert (await agent.get_run(rid)).status == "awaiting_approval"  # a person is asked again
    (asked,) = _of(await store.read_events(rid), PendingAction)
    assert asked.seq > turn_end
    assert asked.args_digest == pending.args_digest
    assert len(effects.payments) == 1


async def test_no_agent_but_a_replay_agent_drives_or_continues_a_replay(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, SMALL)
    run_id = (await collect(agent.run("tip bob", principal=ALICE)))[0].run_id
    rid = await replay(agent, run_id)
    with pytest.raises(RunError, match="is a replay: only a replay agent drives it") as exc:
        await agent.check_resumable(rid)
    assert exc.value.code == "agent_mismatch"
    with pytest.raises(RunError, match="is a replay") as continued:
        await collect(agent.run("tip bob again", principal=ALICE, run_id=rid))
    assert continued.value.code == "state"
    assert (await agent.get_run(rid)).lease_owner is None  # released as it was
    assert len(effects.payments) == 1


async def test_an_auto_write_records_its_tier_and_amount_so_a_replay_compares_like_with_like(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    original = make_agent(effects, store, clock, SMALL)
    run_id = (await collect(original.run("tip bob", principal=ALICE)))[0].run_id
    ends = {e.name: e for e in _of(await store.read_events(run_id), ToolCallEnd)}
    assert (ends["send"].tier, ends["send"].amount_usd) == ("auto", Decimal("5"))
    assert (ends["balance"].tier, ends["balance"].amount_usd) == (None, None)  # a read

    entered: list[str] = []
    host = make_agent(effects, store, clock, SMALL, capabilities=_no_effects(entered))
    rid = await replay(host, run_id)
    found = await diff(store, run_id, rid)
    assert found.first is not None  # the replay's write did not execute: its output differs
    assert "amount_usd" not in found.first.fields
    assert "tier" not in found.first.fields
    assert found.differing_calls == []
    assert found.tiers_a == found.tiers_b == [("send", "auto", "5")]
    text = render_diff(found)
    assert "calls: the same names, arguments, tiers and amounts" in text
    assert "tiers of the writes" not in text


async def test_an_approved_write_records_the_tier_and_amount_the_person_saw(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = make_agent(effects, store, clock, PAY)
    run_id = await _approved_run(agent)
    (sent,) = [e for e in _of(await store.read_events(run_id), ToolCallEnd) if e.name == "send"]
    assert (sent.tier, sent.amount_usd) == ("confirm", Decimal("150"))
