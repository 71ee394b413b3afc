"""Dependencies (fiduciary.deps): ``ctx.deps`` given to a run, made again elsewhere, never
recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from fiduciary import (
    Agent,
    CallContext,
    ConfigurationError,
    RunCompleted,
    RunError,
    RunStarted,
    SQLiteStore,
    capability,
    encode_event,
)
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

ALICE = "alice"
SECRET = "postgres://app:hunter2-" + "x" * 20 + "@db/app"


@dataclass
class Bank:
    """What the application hands the capabilities: live objects, never recorded."""

    dsn: str = SECRET
    sent: list[tuple[str, Decimal]] = field(default_factory=list)


@capability(kind="read")
async def balance(ctx: CallContext[Bank]) -> str:
    """The balance, from the application's own database."""
    return f"{len(ctx.deps.sent)} payments so far"


def _amount(args: Any, ctx: CallContext) -> Decimal:
    return Decimal(args.amount)


@capability(kind="execute", operation="send", amount_usd=_amount)
async def send(to: str, amount: Decimal, ctx: CallContext[Bank]) -> str:
    """Send money through the application's bank client."""
    ctx.deps.sent.append((to, amount))
    return f"sent {amount} to {to}"


SCRIPT = Script(
    "pay",
    [
        ToolCalls([Call("balance")]),
        ToolCalls([Call("send", {"to": "bob", "amount": "900"})]),
        Reply("Paid."),
    ],
)


def make(store: Store, **options: Any) -> Agent:
    options.setdefault("deps_type", Bank)
    return Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=[balance, send],
        store=store,
        authorize=allow_all,
        **options,
    )


async def _pay_and_wait(agent: Agent, bank: Bank) -> UUID:
    events = await collect(agent.run("pay bob", principal=ALICE, deps=bank))
    pending = await agent.pending_approvals(run_id=events[0].run_id)
    assert len(pending) == 1
    await agent.approve(pending[0].approval_id, by=ALICE, confirm_amount="900")
    return events[0].run_id


async def test_handlers_get_the_runs_deps_and_they_are_never_recorded(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent = make(store)
        bank = Bank()
        run_id = await _pay_and_wait(agent, bank)
        # the same process resumes with the deps the run started with
        events = await collect(agent.resume(run_id))
        assert isinstance(events[-1], RunCompleted)
        assert bank.sent == [("bob", Decimal("900"))]
        logged = await store.read_events(run_id)
        started = logged[0]
        assert isinstance(started, RunStarted)
        assert started.deps == f"{__name__}.Bank"
        text = "".join(encode_event(e) for e in logged)
        assert "hunter2" not in text
        assert "Bank(" not in text
        for audit in await store.audit_records(run_id):
            assert "hunter2" not in repr(audit)
    finally:
        await store.close()


async def test_another_process_gets_them_from_the_factory_or_refuses(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    first = SQLiteStore(path)
    run_id = await _pay_and_wait(make(first), Bank())
    await first.close()
    store = SQLiteStore(path)
    try:
        # without deps and without a factory: refused before anything is touched
        bare = make(store)
        with pytest.raises(RunError, match=r"needs deps .*Bank") as refused:
            await bare.check_resumable(run_id)
        assert refused.value.code == "agent_mismatch"
        with pytest.raises(RunError, match="deps_factory"):
            await collect(bare.resume(run_id))
        assert (await store.get_run(run_id)).status == "awaiting_approval"  # type: ignore[union-attr]
        assert await bare.resume_all() == []  # a sweep leaves it alone

        made: list[tuple[UUID, str]] = []
        bank = Bank()

        async def factory(rid: UUID, principal: str) -> Bank:
            made.append((rid, principal))
            return bank

        events = await collect(make(store, deps_factory=factory).resume(run_id))
        assert isinstance(events[-1], RunCompleted)
        assert made == [(run_id, ALICE)]
        assert bank.sent == [("bob", Decimal("900"))]
    finally:
        await store.close()


async def test_resume_may_be_given_the_deps(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    first = SQLiteStore(path)
    run_id = await _pay_and_wait(make(first), Bank())
    await first.close()
    store = SQLiteStore(path)
    try:
        bank = Bank()
        events = await collect(make(store).resume(run_id, deps=bank))
        assert isinstance(events[-1], RunCompleted)
        assert bank.sent
    finally:
        await store.close()


async def test_a_run_needs_its_deps_or_a_factory_and_the_right_type() -> None:
    from fiduciary import MemoryStore

    agent = make(MemoryStore())
    with pytest.raises(RunError, match="need deps") as missing:
        await collect(agent.run("pay bob", principal=ALICE))
    assert missing.value.code == "invalid"
    with pytest.raises(RunError, match=r"deps must be a .*Bank, not a str"):
        await collect(agent.run("pay bob", principal=ALICE, deps="not a bank"))
    with_factory = make(MemoryStore(), deps_factory=lambda rid, who: Bank())
    events = await collect(with_factory.run("pay bob", principal=ALICE))
    assert events[-1].type != "run_failed"


def test_a_capability_reading_deps_needs_an_agent_with_that_deps_type() -> None:
    with pytest.raises(ConfigurationError, match=r"balance reads ctx\.deps as .*Bank"):
        Agent(model=ScriptedModel([]), capabilities=[balance], deps_type=None)
    with pytest.raises(ConfigurationError, match=r"deps_type is (builtins\.)?str"):
        Agent(model=ScriptedModel([]), capabilities=[balance], deps_type=str)

    class MyBank(Bank):
        pass

    Agent(model=ScriptedModel([]), capabilities=[balance], deps_type=MyBank)  # a subclass is one


async def test_an_agent_without_deps_type_records_none() -> None:
    from fiduciary import MemoryStore

    @capability(kind="read")
    async def plain(ctx: CallContext) -> str:
        """No deps."""
        return str(ctx.deps)

    agent = Agent(
        model=ScriptedModel([Script("x", [ToolCalls([Call("plain")]), Reply("ok")])]),
        capabilities=[plain],
        store=MemoryStore(),
        authorize=allow_all,
    )
    events = await collect(agent.run("x", principal=ALICE))
    assert isinstance(events[0], RunStarted)
    assert events[0].deps is None
    assert '"deps"' not in encode_event(events[0])
    ends = [e for e in events if e.type == "tool_call_end"]
    assert "None" in ends[0].output


async def test_a_run_with_deps_replays_from_its_recording(tmp_path: Path) -> None:
    from fiduciary.observability.replay import replay

    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent = make(store)
        bank = Bank()
        run_id = await _pay_and_wait(agent, bank)
        await collect(agent.resume(run_id))
        again = await replay(agent, run_id)
        assert (await store.get_run(again)).status == "completed"  # type: ignore[union-attr]
        assert bank.sent == [("bob", Decimal("900"))]  # the replay executed nothing
    finally:
        await store.close()
