"""Guards: the order they are asked in, what a block stops, and the two built-in guards."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import uuid4

import pytest

from fiduciary import Agent, Capability, GuardCall, GuardFired, ManualClock, Verdict, capability
from fiduciary.capabilities import Principal, args_digest
from fiduciary.events import Event, PendingAction, ToolCallEnd
from fiduciary.guards import (
    CallRecord,
    Guard,
    IrreversibilityGuard,
    RetryProtectionGuard,
    RunHistory,
    default_guards,
    run_guards,
)
from fiduciary.models.base import ToolResultsMessage
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

from .conftest import Effects, toy_capabilities

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TierName = Literal["safety", "financial", "ux"]
PhaseName = Literal["pre", "post"]


@dataclass
class Recording:
    """A guard that answers a fixed verdict and records that it was asked."""

    name: str
    tier: TierName
    verdict: Verdict = field(default_factory=Verdict.ok)
    phase: PhaseName = "pre"
    log: list[str] = field(default_factory=list)

    def check(self, call: GuardCall) -> Verdict:
        self.log.append(self.name)
        return self.verdict


@dataclass
class AsyncRecording(Recording):
    async def check(self, call: GuardCall) -> Verdict:  # type: ignore[override]
        self.log.append(self.name)
        return self.verdict


def make_cap(
    *, kind: str = "execute", flags: frozenset[str] = frozenset({"irreversible"})
) -> Capability:
    @capability(name="send", kind=kind, flags=flags)
    async def send(to: str, amount: Decimal) -> None:
        """Send USD."""

    return send


def guard_call(
    cap: Capability | None = None,
    args: dict[str, Any] | None = None,
    history: RunHistory | None = None,
) -> GuardCall:
    args = {"to": "bob", "amount": "5"} if args is None else args
    return GuardCall(
        capability=cap or make_cap(),
        args=args,
        args_digest=args_digest(args),
        tool_use_id="toolu_now",
        run_id=uuid4(),
        principal=Principal("alice"),
        history=history or RunHistory(),
        now=NOW,
    )


def record(
    name: str = "send",
    args: dict[str, Any] | None = None,
    *,
    ok: bool | None = True,
    kind: str | None = "execute",
    tool_use_id: str = "toolu_before",
) -> CallRecord:
    args = {"to": "bob", "amount": "5"} if args is None else args
    return CallRecord(
        tool_use_id=tool_use_id,
        name=name,
        kind=kind,
        input=args,
        args_digest=args_digest(args),
        at=NOW,
        ok=ok,
    )


# --- the runner ---------------------------------------------------------------------------


async def test_guards_are_asked_safety_then_financial_then_ux() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        Recording("ux1", "ux", Verdict.hint("u1"), log=log),
        Recording("fin", "financial", Verdict.warn("f"), log=log),
        Recording("ux2", "ux", Verdict.hint("u2"), log=log),
        Recording("safe1", "safety", Verdict.ok(), log=log),
        Recording("safe2", "safety", Verdict.hint("s2"), log=log),
    ]
    outcome = await run_guards(guards, guard_call(), "pre")
    assert log == ["safe1", "safe2", "fin", "ux1", "ux2"]  # stable within a tier
    assert outcome.block is None
    assert [(g.name, v) for g, v in outcome.notes] == [
        ("safe2", Verdict.hint("s2")),
        ("fin", Verdict.warn("f")),
        ("ux1", Verdict.hint("u1")),
        ("ux2", Verdict.hint("u2")),
    ]
    assert outcome.messages == ["[safe2] s2", "[fin] f", "[ux1] u1", "[ux2] u2"]


async def test_first_block_stops_the_runner() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        Recording("ux", "ux", Verdict.hint("late"), log=log),
        Recording("fin_block", "financial", Verdict.block("over budget"), log=log),
        Recording("fin_after", "financial", Verdict.block("second"), log=log),
        Recording("safe", "safety", Verdict.warn("careful"), log=log),
    ]
    outcome = await run_guards(guards, guard_call(), "pre")
    assert log == ["safe", "fin_block"]
    assert outcome.block == ("fin_block", "financial", Verdict.block("over budget"))
    assert outcome.messages == ["[safe] careful"]


async def test_a_safety_block_is_asked_before_a_configured_earlier_guard() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        Recording("ux", "ux", log=log),
        Recording("fin", "financial", log=log),
        Recording("safe", "safety", Verdict.block("no"), log=log),
    ]
    outcome = await run_guards(guards, guard_call(), "pre")
    assert log == ["safe"]
    assert outcome.block is not None
    assert outcome.block[0] == "safe"


async def test_guards_of_the_other_phase_are_not_asked() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        Recording("pre", "safety", Verdict.block("pre"), phase="pre", log=log),
        Recording("post", "safety", Verdict.hint("post"), phase="post", log=log),
    ]
    post = await run_guards(guards, guard_call(), "post")
    assert log == ["post"]
    assert post.block is None
    assert post.messages == ["[post] post"]
    log.clear()
    pre = await run_guards(guards, guard_call(), "pre")
    assert log == ["pre"]
    assert pre.block is not None


async def test_a_block_after_the_effect_is_a_warning() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        Recording("fin", "financial", Verdict.block("that was a lot"), phase="post", log=log),
        Recording("ux", "ux", Verdict.hint("say thanks"), phase="post", log=log),
    ]
    outcome = await run_guards(guards, guard_call(), "post")
    assert outcome.block is None
    assert log == ["fin", "ux"]  # nothing stops after the effect
    assert [v for _, v in outcome.notes] == [
        Verdict.warn("that was a lot"),
        Verdict.hint("say thanks"),
    ]


async def test_async_guards_are_awaited() -> None:
    log: list[str] = []
    guards: list[Guard] = [
        AsyncRecording("async_ux", "ux", Verdict.hint("h"), log=log),
        AsyncRecording("async_safe", "safety", Verdict.block("stop"), log=log),
    ]
    outcome = await run_guards(guards, guard_call(), "pre")
    assert log == ["async_safe"]
    assert outcome.block == ("async_safe", "safety", Verdict.block("stop"))
    log.clear()
    guards[1] = AsyncRecording("async_safe", "safety", Verdict.warn("w"), log=log)
    outcome = await run_guards(guards, guard_call(), "pre")
    assert outcome.messages == ["[async_safe] w", "[async_ux] h"]


async def test_no_guards_no_outcome() -> None:
    outcome = await run_guards([], guard_call(), "pre")
    assert outcome.block is None
    assert outcome.notes == []


def test_verdict_constructors() -> None:
    assert Verdict.ok() == Verdict("pass", "")
    assert Verdict.hint("h") == Verdict("hint", "h")
    assert Verdict.warn("w") == Verdict("warn", "w")
    assert Verdict.block("b") == Verdict("block", "b")
    assert Verdict.confirm("c") == Verdict("warn", "c", needs_person=True)


def test_default_guards() -> None:
    guards = default_guards()
    assert [type(g) for g in guards] == [RetryProtectionGuard, IrreversibilityGuard]
    assert [(g.name, g.tier, g.phase) for g in guards] == [
        ("retry_protection", "safety", "pre"),
        ("irreversibility", "ux", "pre"),
    ]


# --- RetryProtectionGuard -----------------------------------------------------------------


def test_retry_protection_blocks_an_identical_successful_irreversible_call() -> None:
    history = RunHistory(calls=[record(tool_use_id="toolu_first")])
    verdict = RetryProtectionGuard().check(guard_call(history=history))
    assert verdict.kind == "block"
    assert "toolu_first" in verdict.message
    assert "irreversible" in verdict.message


@pytest.mark.parametrize(
    "prior",
    [
        record(ok=False),  # it failed: trying again is fine
        record(ok=None),  # no outcome known
        record(args={"to": "bob", "amount": "6"}),  # different arguments
        record(name="send_other"),  # a different capability
    ],
    ids=["failed", "no_outcome", "other_args", "other_name"],
)
def test_retry_protection_lets_other_calls_through(prior: CallRecord) -> None:
    history = RunHistory(calls=[prior])
    assert RetryProtectionGuard().check(guard_call(history=history)) == Verdict.ok()


def test_retry_protection_ignores_reversible_capabilities() -> None:
    history = RunHistory(calls=[record()])
    for cap in (make_cap(flags=frozenset()), make_cap(kind="read", flags=frozenset({"mutating"}))):
        assert RetryProtectionGuard().check(guard_call(cap, history=history)) == Verdict.ok()


def test_retry_protection_looks_across_user_messages() -> None:
    history = RunHistory(calls=[record()])
    history.add_user_message("do it again")
    assert RetryProtectionGuard().check(guard_call(history=history)).kind == "block"


# --- IrreversibilityGuard -----------------------------------------------------------------


def preview(*, ok: bool | None = True) -> CallRecord:
    return record("quote_send", {"to": "bob"}, kind="preview", ok=ok, tool_use_id="toolu_quote")


def test_irreversible_call_without_preview_gets_a_hint() -> None:
    history = RunHistory()
    history.add_user_message("send bob 5")
    verdict = IrreversibilityGuard().check(guard_call(history=history))
    assert verdict.kind == "hint"
    assert "send cannot be undone" in verdict.message


def test_a_preview_since_the_person_spoke_satisfies_the_guard() -> None:
    history = RunHistory()
    history.add_user_message("send bob 5")
    history.calls.append(preview())
    assert IrreversibilityGuard().check(guard_call(history=history)) == Verdict.ok()


@pytest.mark.parametrize(
    "calls",
    [
        [record("balance", {}, kind="read")],  # a read is not a preview
        [preview(ok=False)],  # a failed preview showed nothing
        [preview(ok=None)],
    ],
    ids=["read", "failed_preview", "unfinished_preview"],
)
def test_not_a_successful_preview(calls: list[CallRecord]) -> None:
    history = RunHistory()
    history.add_user_message("send bob 5")
    history.calls.extend(calls)
    assert IrreversibilityGuard().check(guard_call(history=history)).kind == "hint"


def test_a_preview_before_the_last_user_message_does_not_count() -> None:
    history = RunHistory()
    history.add_user_message("what would it cost?")
    history.calls.append(preview())
    history.add_user_message("ok, send it to carol instead")
    assert IrreversibilityGuard().check(guard_call(history=history)).kind == "hint"
    history.calls.append(preview())
    assert IrreversibilityGuard().check(guard_call(history=history)) == Verdict.ok()


def test_irreversibility_ignores_reversible_capabilities() -> None:
    call = guard_call(make_cap(flags=frozenset({"mutating"})))
    assert IrreversibilityGuard().check(call) == Verdict.ok()


# --- end to end ---------------------------------------------------------------------------


@dataclass
class TransferWarningGuard:
    """A host's financial guard: warns on every send, naming the amount."""

    name: str = "transfer_warning"
    tier: TierName = "financial"
    phase: PhaseName = "pre"

    def check(self, call: GuardCall) -> Verdict:
        if call.capability.name == "send":
            return Verdict.warn(f"${call.args['amount']} leaves the account for good")
        return Verdict.ok()


def warned_agent(
    effects: Effects, store: Store, clock: ManualClock, amount: str
) -> tuple[Agent, ScriptedModel]:
    script = Script(
        "pay carol",
        [ToolCalls([Call("send", {"to": "carol", "amount": amount})]), Reply("sent")],
    )
    model = ScriptedModel([script])
    agent = Agent(
        model=model,
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
        guards=[TransferWarningGuard()],
    )
    return agent, model


def result_text(model: ScriptedModel, tool_use_id: str) -> str:
    """The tool result the model was last shown for one call."""
    (content,) = [
        r.content
        for m in model.requests[-1].messages
        if isinstance(m, ToolResultsMessage)
        for r in m.results
        if r.tool_use_id == tool_use_id
    ]
    return content


def fired(events: list[Event]) -> list[tuple[str, str, str, str, str]]:
    return [
        (e.guard, e.tier, e.phase, e.verdict, e.message)
        for e in events
        if isinstance(e, GuardFired)
    ]


async def test_a_warning_on_an_auto_call_reaches_the_log_and_the_model(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, model = warned_agent(effects, store, clock, "5")  # balanced: auto below $10
    events = await collect(agent.run("pay carol", principal="alice"))
    warning = "$5 leaves the account for good"
    assert fired(events) == [("transfer_warning", "financial", "pre", "warn", warning)]
    assert not [e for e in events if isinstance(e, PendingAction)]
    assert effects.payments == [{"to": "carol", "amount": Decimal("5"), "memo": ""}]
    (end,) = [e for e in events if isinstance(e, ToolCallEnd)]
    assert warning in end.hints
    text = result_text(model, end.tool_use_id)
    assert text.startswith('{"sent": "5"')
    assert warning in text


async def test_a_warning_reaches_the_log_the_person_and_after_approval_the_model(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, model = warned_agent(effects, store, clock, "150")  # balanced: confirm
    events = await collect(agent.run("pay carol", principal="alice"))
    warning = "$150 leaves the account for good"
    assert fired(events) == [("transfer_warning", "financial", "pre", "warn", warning)]
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert [(n.guard, n.verdict, n.message) for n in pending.guard_notes] == [
        ("transfer_warning", "warn", warning)
    ]
    assert effects.payments == []

    await agent.approve(pending.approval_id, by="alice")
    more = await collect(agent.resume(events[0].run_id))
    assert effects.payments == [{"to": "carol", "amount": Decimal("150"), "memo": ""}]
    (end,) = [e for e in more if isinstance(e, ToolCallEnd)]
    assert not end.is_error
    text = result_text(model, pending.tool_use_id)
    assert text.startswith('{"sent": "150"')
    assert warning in text


@dataclass
class HoldingGuard:
    """A host's guard that wants a person to look at every send, whatever the amount."""

    name: str = "first_payment"
    tier: TierName = "safety"
    phase: PhaseName = "pre"

    def check(self, call: GuardCall) -> Verdict:
        return Verdict.confirm(f"first payment to {call.args.get('to', '?')}")


async def test_a_confirm_verdict_holds_an_auto_write_for_a_person(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "pay carol",
        [
            ToolCalls([Call("balance"), Call("send", {"to": "carol", "amount": "0.01"})]),
            Reply("asked"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
        guards=[HoldingGuard()],
    )
    events = await collect(agent.run("pay carol", principal="alice"))
    # the read ran (a read is never held); the one-cent send, auto by amount, waits
    assert [e.name for e in events if isinstance(e, ToolCallEnd)] == ["balance"]
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert (pending.name, pending.tier, pending.amount_usd) == ("send", "confirm", Decimal("0.01"))
    assert [(n.guard, n.verdict) for n in pending.guard_notes] == [("first_payment", "warn")]
    assert effects.payments == []
    await agent.approve(pending.approval_id, by="alice")
    await collect(agent.resume(events[0].run_id))
    assert effects.payments == [{"to": "carol", "amount": Decimal("0.01"), "memo": ""}]


async def test_a_confirm_verdict_never_lowers_a_tier(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("pay carol", [ToolCalls([Call("send", {"to": "carol", "amount": "900"})])])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
        guards=[HoldingGuard()],
    )
    events = await collect(agent.run("pay carol", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert pending.tier == "explicit"  # balanced: $200 or more re-types the amount
