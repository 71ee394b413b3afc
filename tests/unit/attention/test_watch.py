"""The record and the watcher: cursor before acting, dedup, backoff, permanent stops, runs."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, ManualClock, RunStarted, capability
from fiduciary.attention.actions import RouteAction, decision_id_of, run_id_of
from fiduciary.attention.record import AttentionRecord, DecisionRecord
from fiduciary.attention.testing import ListSource, RuleJudge
from fiduciary.attention.types import Batch, Incoming, JudgeInput, PermanentError
from fiduciary.attention.watch import Attention, Report
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.stores.base import Store
from fiduciary.testing import allow_all
from tests.agent_support import Effects, toy_capabilities
from tests.waiting import wait_for

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def incoming(i: int, *, source: str = "list", principal: str | None = "alice") -> Incoming:
    return Incoming(
        id=f"ev-{i}",
        source=source,
        type="payment_received",
        at=T0 + timedelta(minutes=i),
        principal=principal,
        data={"amount": str(10 * i)},
    )


NOTIFY_ALL = {
    "notify": RouteAction(do="notify"),
    "drop": RouteAction(do="drop"),
}


class Notes:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def __call__(self, decision: DecisionRecord, message: str) -> None:
        self.sent.append((decision.event_id, message))


def watcher(record: AttentionRecord, judge: Any, **kwargs: Any) -> Attention:
    kwargs.setdefault("routes", NOTIFY_ALL)
    kwargs.setdefault("clock", ManualClock(T0))
    return Attention(judge=judge, record=record, **kwargs)


async def test_the_cursor_is_persisted_before_the_batch_is_judged() -> None:
    record = AttentionRecord()
    cursors: list[str | None] = []

    judge = RuleJudge(lambda _: "drop")

    async def judging(judge_input: JudgeInput) -> Any:
        cursors.append(await record.cursor("list"))
        return await judge(judge_input)

    source = ListSource([incoming(i) for i in range(4)], size=2)
    await watcher(record, judging_judge(judging), sources=[source]).run()
    assert cursors == ["2", "2", "4", "4"]
    assert len(await record.decisions()) == 4


def judging_judge(fn: Any) -> Any:
    class Wrapped:
        name = "wrapped"

        async def __call__(self, judge_input: JudgeInput) -> Any:
            return await fn(judge_input)

    return Wrapped()


async def test_a_redelivered_event_gets_one_decision(tmp_path: Path) -> None:
    path = str(tmp_path / "attention.sqlite3")
    judge = RuleJudge(lambda _: "notify")
    notes = Notes()
    first = watcher(AttentionRecord(path), judge, notify=notes)
    await first.accept("list", Batch(events=(incoming(1), incoming(2)), cursor="a"))
    await first.accept("list", Batch(events=(incoming(2), incoming(3)), cursor="b"))
    # a new process, the same events delivered again
    again = watcher(AttentionRecord(path), judge, notify=notes)
    await again.run()
    await again.accept("list", Batch(events=(incoming(1), incoming(3)), cursor="c"))
    decisions = await AttentionRecord(path).decisions()
    assert [d.event_id for d in decisions] == ["ev-1", "ev-2", "ev-3"]
    assert judge.calls == 3
    assert [e for e, _ in notes.sent] == ["ev-1", "ev-2", "ev-3"]
    assert await AttentionRecord(path).cursor("list") == "c"


async def test_an_event_naming_another_source_is_judged_once_and_not_after_a_restart(
    tmp_path: Path,
) -> None:
    """A source whose events carry another ``source`` field: everything is keyed by the source's
    name, so the event is decided once, leaves the pending table, keeps its copy, and a new record
    over the same file does not judge it again."""
    path = str(tmp_path / "attention.sqlite3")
    judge = RuleJudge(lambda _: "notify")
    notes = Notes()
    source = ListSource([incoming(1, source="elsewhere")], name="list", size=1)
    first = AttentionRecord(path)
    await watcher(first, judge, sources=[source], notify=notes).run()
    (decision,) = await first.decisions()
    assert (decision.source, decision.event_id, decision.kind) == ("list", "ev-1", "decision")
    assert decision.decision_id == decision_id_of("list", "ev-1")
    assert await first.pending() == []
    kept = await first.event_of(decision)
    assert kept is not None
    assert (kept.id, kept.source) == ("ev-1", "list")
    assert judge.calls == 1
    await first.close()
    # a restart: a new record over the same file, the same source reopened from its cursor
    again = AttentionRecord(path)
    await watcher(again, judge, sources=[source], notify=notes).run()
    assert judge.calls == 1
    assert await again.pending() == []
    assert [d.event_id for d in await again.decisions()] == ["ev-1"]
    assert [e for e, _ in notes.sent] == ["ev-1"]
    await again.close()


async def test_a_decision_records_what_the_judge_said() -> None:
    record = AttentionRecord()
    attention = watcher(record, RuleJudge(lambda _: "notify", confidence=0.9))
    (decision,) = await attention.accept("list", Batch(events=(incoming(7),), cursor="1"))
    assert decision.decision_id == decision_id_of("list", "ev-7")
    assert decision.route == "notify"
    assert decision.probabilities == pytest.approx({"notify": 0.9, "drop": 0.1})
    assert decision.model == "rule"
    assert len(decision.input_digest) == 64
    assert decision.action == "notified"
    assert decision.kind == "decision"


async def test_retryable_errors_back_off_with_jitter_and_reopen_from_the_committed_cursor() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    reports: list[Report] = []
    source = ListSource(
        [incoming(i) for i in range(6)],
        size=2,
        fail={2: ConnectionError("reset"), 4: TimeoutError("slow")},
    )
    record = AttentionRecord()
    attention = watcher(
        record,
        RuleJudge(lambda _: "drop"),
        sources=[source],
        sleep=sleep,
        jitter=lambda: 0.5,
        initial_backoff=2.0,
        on_report=reports.append,
    )
    await attention.run()
    assert source.opened == [None, "2", "4"]
    assert waits == [1.0, 1.0]  # the count resets after a batch goes through
    assert [r.kind for r in reports] == ["retry", "retry"]
    assert len(await record.decisions()) == 6


async def test_backoff_grows_while_the_source_keeps_failing() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    class Flaky:
        name = "flaky"
        opens = 0

        async def batches(self, cursor: str | None) -> Any:
            self.opens += 1
            if self.opens < 5:
                raise ConnectionError("down")
            if self.opens == 5:
                raise PermanentError("the client is closed")
            yield Batch(events=(), cursor=None)

    reports: list[Report] = []
    attention = watcher(
        AttentionRecord(),
        RuleJudge(lambda _: "drop"),
        sources=[Flaky()],
        sleep=sleep,
        jitter=lambda: 1.0,
        initial_backoff=1.0,
        max_backoff=5.0,
        on_report=reports.append,
    )
    await attention.run()
    assert waits == [1.0, 2.0, 4.0, 5.0]
    assert reports[-1].kind == "stopped"
    assert reports[-1].message == "the client is closed"


async def test_a_judge_that_cannot_decide_leaves_a_dead_letter() -> None:
    class Refusing:
        name = "refusing"

        async def __call__(self, judge_input: JudgeInput) -> Any:
            raise PermanentError("the judge refused")

    record = AttentionRecord()
    attention = watcher(record, Refusing())
    (dead,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert dead.kind == "dead_letter"
    assert dead.route is None
    assert dead.error == "the judge refused"
    assert [r.kind for r in attention.reports] == ["dead_letter"]
    assert await record.pending() == []


async def test_a_retryable_judge_failure_keeps_the_event_pending() -> None:
    class Down:
        name = "down"

        async def __call__(self, judge_input: JudgeInput) -> Any:
            raise ConnectionError("model unreachable")

    record = AttentionRecord()
    with pytest.raises(ConnectionError):
        await watcher(record, Down()).accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert [e.id for e in await record.pending()] == ["ev-1"]
    assert await record.decisions() == []
    (decision,) = await watcher(record, RuleJudge(lambda _: "drop")).judge_pending()
    assert decision.event_id == "ev-1"


# --- runs started by decisions ------------------------------------------------------------


PAY = Script(
    "payment_received",
    [ToolCalls([Call("send", {"to": "bob", "amount": "40"})]), Reply("sent")],
)


def run_routes(**changes: Any) -> dict[str, RouteAction]:
    act = RouteAction(do="run", capabilities=("balance", "send"), **changes)
    return {"act": act, "drop": RouteAction(do="drop")}


async def test_the_same_decision_twice_starts_one_run(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = Agent(
        model=ScriptedModel([PAY]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    record = AttentionRecord()
    attention = watcher(record, RuleJudge(lambda _: "act"), agent=agent, routes=run_routes())
    (decision,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert decision.run_id == run_id_of(decision.decision_id)
    # acted on again, as after a restart between the decision and its action
    record._db.conn.execute("UPDATE attention_decisions SET action = NULL")
    again = watcher(record, RuleJudge(lambda _: "act"), agent=agent, routes=run_routes())
    await again.recover()
    runs = await store.list_runs()
    assert [r.run_id for r in runs] == [decision.run_id]
    assert (await store.read_events(decision.run_id))[1].type == "user_message"


async def test_a_write_in_a_decision_started_run_still_needs_approval(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = Agent(
        model=ScriptedModel([PAY]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    attention = watcher(
        AttentionRecord(),
        RuleJudge(lambda _: "act"),
        agent=agent,
        routes=run_routes(plan_first=False),
    )
    (decision,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert decision.action == "run:awaiting_approval"
    assert effects.payments == []
    (pending,) = await agent.pending_approvals(run_id=decision.run_id)
    assert pending.capability == "send"


def proposing(done: list[str]) -> Any:
    """A $-amount ``propose`` write (what plan-first still allows), counting its executions."""

    @capability(kind="propose", operation="save", amount_usd=lambda a, c: Decimal(a.usd))
    async def propose_saving(usd: str) -> dict[str, str]:
        """Set USD aside for the person."""
        done.append(usd)
        return {"set_aside": usd}

    return propose_saving


SAVE_ONE = Script(
    "payment_received",
    [ToolCalls([Call("propose_saving", {"usd": "1"})]), Reply("set aside")],
)


async def test_a_one_dollar_proposal_of_a_decision_started_run_waits_for_a_person(
    store: Store, clock: ManualClock
) -> None:
    done: list[str] = []
    agent = Agent(  # the balanced preset: $1 of "save" is automatic for the principal
        model=ScriptedModel([SAVE_ONE]),
        capabilities=[proposing(done)],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    routes = {"act": RouteAction(do="run"), "drop": RouteAction(do="drop")}
    attention = watcher(AttentionRecord(), RuleJudge(lambda _: "act"), agent=agent, routes=routes)
    (decision,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert decision.action == "run:awaiting_approval"
    assert done == []
    assert decision.run_id is not None
    started = (await store.read_events(decision.run_id))[0]
    assert isinstance(started, RunStarted)
    assert started.origin is not None
    assert started.origin.source == "attention:act"
    (pending,) = await agent.pending_approvals(run_id=decision.run_id)
    assert (pending.capability, pending.amount_usd) == ("propose_saving", Decimal("1"))


async def test_a_route_with_an_autonomous_budget_lets_its_runs_act_within_it(
    store: Store, clock: ManualClock
) -> None:
    done: list[str] = []
    agent = Agent(
        model=ScriptedModel([SAVE_ONE]),
        capabilities=[proposing(done)],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    act = RouteAction(do="run", autonomous={"save": Decimal("5")})
    routes = {"act": act, "drop": RouteAction(do="drop")}
    attention = watcher(AttentionRecord(), RuleJudge(lambda _: "act"), agent=agent, routes=routes)
    (decision,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert decision.action == "run:completed"
    assert done == ["1"]


async def test_plan_first_by_default_keeps_writes_out_of_reach(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = Agent(
        model=ScriptedModel([PAY]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    attention = watcher(
        AttentionRecord(), RuleJudge(lambda _: "act"), agent=agent, routes=run_routes()
    )
    (decision,) = await attention.accept("list", Batch(events=(incoming(1),), cursor="1"))
    assert decision.run_id is not None
    events = await store.read_events(decision.run_id)
    assert events[0].allowed_kinds == ["preview", "propose", "read"]  # type: ignore[union-attr]
    assert any(e.type == "tool_call_rejected" for e in events)
    assert effects.payments == []


# --- a kill after a cursor commit ---------------------------------------------------------


def test_a_kill_after_the_cursor_commit_resumes_from_it_without_duplicate_decisions(
    tmp_path: Path,
) -> None:
    record_path = tmp_path / "attention.sqlite3"
    log = tmp_path / "log.txt"
    log.touch()
    child = Path(__file__).with_name("kill_child.py")
    first = subprocess.Popen([sys.executable, str(child), str(record_path), str(log), "first"])
    try:
        wait_for(
            lambda: "blocked ev-3" in log.read_text() or first.poll() is not None,
            what="the first process to reach ev-3",
            timeout=60,
        )
        assert first.poll() is None, "the first process ended early"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    committed = sqlite3.connect(record_path).execute(
        "SELECT cursor FROM attention_cursors WHERE source = 'list'"
    )
    assert committed.fetchone() == ("4",)  # taken before ev-3 was judged
    second = subprocess.run(
        [sys.executable, str(child), str(record_path), str(log), "second"], timeout=60
    )
    assert second.returncode == 0
    lines = log.read_text().splitlines()
    assert [x for x in lines if "opened" in x] == ["first opened None", "second opened 4"]
    notified = [x.split()[-1] for x in lines if "notified" in x]
    assert notified == [f"ev-{i}" for i in range(6)]  # each once, none lost
    judged = [x.split()[-1] for x in lines if "judged" in x]
    assert judged == [f"ev-{i}" for i in range(6)]
    assert lines[-1] == "second done"
    rows = sqlite3.connect(record_path).execute(
        "SELECT event_id, count(*) FROM attention_decisions GROUP BY event_id ORDER BY event_id"
    )
    assert rows.fetchall() == [(f"ev-{i}", 1) for i in range(6)]
