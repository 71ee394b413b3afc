"""Fault injection: run a scenario in forked processes and SIGKILL one at a chosen point.

A kill point is (phase, where, n): in the process playing ``phase`` ("start", "decide" or
"resume"), kill it just before or just after its n-th store write, or inside the n-th handler
entry just before or just after its external effect. The effects land in their own SQLite file
that honours idempotency keys and counts every handler entry, so the parent can check "at most
once". Every event a process yields is appended to ``seen.jsonl`` with a raw ``os.write`` (it
survives SIGKILL), so the parent can check that what a listener saw is a prefix of the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeVar
from uuid import UUID

from fiduciary import Agent, CallContext, CapabilityError, Policy, capability, encode_event
from fiduciary.capabilities import Capability
from fiduciary.events import Event
from fiduciary.stores.base import (
    ApprovalRecord,
    ApprovalStatus,
    ApprovalVote,
    AuditRecord,
    GlobalPage,
    LedgerEntry,
    LedgerRow,
    LedgerStatus,
    RecordQuery,
    RunRecord,
    RunStatus,
    Store,
    Subscription,
)
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all
from tests.waiting import eventually

T = TypeVar("T")
Backend = Literal["sqlite", "postgres"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgres")
Phase = Literal["start", "decide", "resume", "followup"]
Where = Literal["before_write", "after_write", "before_effect", "after_effect"]
PRINCIPAL = "alice"
ROOT = Path(__file__).parents[2]


def run_child(script: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Run the child ``script`` with ``args`` from the repository's root (it may import the
    tests' modules) to its end or its death; its exit code and output."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@dataclass(frozen=True)
class Kill:
    step: int  # which of the scenario's phases (0-based) is killed
    where: Where
    n: int

    def __str__(self) -> str:
        return f"step{self.step}:{self.where}:{self.n}"


@dataclass
class Counters:
    writes: int = 0
    entries: int = 0
    applied: list[int] = field(default_factory=list)  # the entries whose effect was applied


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached


class FaultyStore:
    """A store (SQLite or PostgreSQL) with a trap door before or after its n-th write."""

    def __init__(self, inner: Store, kill: Kill | None, counters: Counters) -> None:
        self.inner = inner
        self.kill = kill
        self.counters = counters

    async def _trap(self, call: Awaitable[T]) -> T:
        self.counters.writes += 1
        n = self.counters.writes
        if self.kill and self.kill.where == "before_write" and self.kill.n == n:
            _die()
        result = await call
        if self.kill and self.kill.where == "after_write" and self.kill.n == n:
            _die()
        return result

    # --- writes: trapped --------------------------------------------------------------------
    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        await self._trap(self.inner.create_run(run, events))

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
        release: bool = False,
        ledger_begin: LedgerEntry | None = None,
    ) -> LedgerEntry | None:
        return await self._trap(
            self.inner.commit(
                run_id,
                epoch=epoch,
                events=events,
                status=status,
                approvals=approvals,
                audit=audit,
                release=release,
                ledger_begin=ledger_begin,
            )
        )

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        return await self._trap(
            self.inner.acquire(run_id, owner=owner, now=now, ttl_seconds=ttl_seconds)
        )

    async def release(self, run_id: UUID, *, epoch: int) -> None:
        await self._trap(self.inner.release(run_id, epoch=epoch))

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        return await self._trap(
            self.inner.decide_approval(approval, expected_status=expected_status)
        )

    async def add_vote(self, vote: ApprovalVote) -> bool:
        return await self._trap(self.inner.add_vote(vote))

    async def list_votes(self, approval_id: UUID) -> list[ApprovalVote]:
        return await self.inner.list_votes(approval_id)

    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        return await self._trap(self.inner.ledger_begin(entry, epoch=epoch))

    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        await self._trap(
            self.inner.ledger_finish(key, status=status, at=at, result=result, error=error)
        )

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        return await self._trap(self.inner.ledger_retry(key, at=at))

    # --- the rest: as is --------------------------------------------------------------------
    async def renew(self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float) -> bool:
        return await self.inner.renew(run_id, epoch=epoch, now=now, ttl_seconds=ttl_seconds)

    async def get_run(self, run_id: UUID) -> RunRecord | None:
        return await self.inner.get_run(run_id)

    async def list_runs(
        self, *, principal: str | None = None, status: RunStatus | None = None, limit: int = 100
    ) -> list[RunRecord]:
        return await self.inner.list_runs(principal=principal, status=status, limit=limit)

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        return await self.inner.read_events(run_id, after_seq=after_seq, limit=limit)

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        return await self.inner.runs_to_resume(now=now, limit=limit)

    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None:
        return await self.inner.get_approval(approval_id)

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]:
        return await self.inner.list_approvals(principal=principal, run_id=run_id, status=status)

    async def ledger_get(self, key: str) -> LedgerEntry | None:
        return await self.inner.ledger_get(key)

    async def audit_records(self, run_id: UUID) -> list[AuditRecord]:
        return await self.inner.audit_records(run_id)

    async def find_audit(self, query: RecordQuery) -> list[AuditRecord]:
        return await self.inner.find_audit(query)

    async def find_ledger(self, query: RecordQuery) -> list[LedgerRow]:
        return await self.inner.find_ledger(query)

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        return await self.inner.autonomous_spend(principal, since=since)

    async def reserve_autonomous(
        self,
        principal: str,
        amount_usd: Decimal,
        *,
        limit: Decimal,
        since: datetime,
        key: str,
        at: datetime,
    ) -> bool:
        return await self.inner.reserve_autonomous(
            principal, amount_usd, limit=limit, since=since, key=key, at=at
        )

    async def release_autonomous(self, key: str) -> None:
        await self.inner.release_autonomous(key)

    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> Subscription:
        return self.inner.subscribe(run_id, buffer=buffer)

    async def read_global(
        self,
        *,
        after: int = 0,
        limit: int = 500,
        principal: str | None = None,
        statuses: Collection[RunStatus] | None = None,
        types: Collection[str] | None = None,
    ) -> GlobalPage:
        return await self.inner.read_global(
            after=after, limit=limit, principal=principal, statuses=statuses, types=types
        )

    @property
    def commit_generation(self) -> int:
        return self.inner.commit_generation

    async def wait_for_commits(self, *, since: int) -> int:
        return await self.inner.wait_for_commits(since=since)

    async def close(self) -> None:
        await self.inner.close()


class EffectTarget:
    """The outside world: applies each key at most once and counts every handler entry."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, payee TEXT, amount TEXT);"
            "CREATE TABLE IF NOT EXISTS entries (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT,"
            " applied INTEGER);"
        )

    def enter(self, key: str) -> int:
        cur = self.conn.execute("INSERT INTO entries (key, applied) VALUES (?, 0)", (key,))
        return int(cur.lastrowid or 0)

    def apply(self, entry: int, key: str, payee: str, amount: str) -> bool:
        self.conn.execute("BEGIN IMMEDIATE")
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (key, payee, amount)
        )
        self.conn.execute("UPDATE entries SET applied = 1 WHERE n = ?", (entry,))
        self.conn.execute("COMMIT")
        return cur.rowcount == 1

    def effects(self) -> list[tuple[str, str, str]]:
        return list(self.conn.execute("SELECT key, payee, amount FROM effects ORDER BY key"))

    def entries(self) -> list[tuple[str, int]]:
        return [(r[0], int(r[1])) for r in self.conn.execute("SELECT key, applied FROM entries")]

    def close(self) -> None:
        self.conn.close()


def capabilities(target: EffectTarget, kill: Kill | None, counters: Counters) -> list[Capability]:
    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        return {"usd": "5000.00"}

    @capability(kind="read")
    async def payees() -> list[str]:
        """Known payees."""
        return ["plumber", "landlord", "gym", "grocer"]

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(
        kind="execute",
        operation="send",
        amount_usd=amount,
        flags={"irreversible"},
        modifiable_fields=["amount"],
    )
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        counters.entries += 1
        n = counters.entries
        entry = target.enter(ctx.idempotency_key)
        if kill and kill.where == "before_effect" and kill.n == n:
            _die()
        if Decimal(amount) <= 0:
            raise CapabilityError("invalid_amount", "the amount must be positive")
        applied = target.apply(entry, ctx.idempotency_key, payee, amount)
        counters.applied.append(n)
        if kill and kill.where == "after_effect" and kill.n == n:
            _die()
        return {"payee": payee, "amount": amount, "applied": applied}

    return [balance, payees, send]


@dataclass(frozen=True)
class Scenario:
    name: str
    message: str
    script: Script
    # what the person decides for each payee awaiting approval: "=" approves as asked, another
    # amount approves with that edit, None denies
    decisions: dict[str, str | None] = field(default_factory=dict)
    # every (payee, amount) that may be applied; each payee at most once
    allowed: frozenset[tuple[str, str]] = frozenset()
    # the processes a person's session goes through, one after another
    phases: tuple[Phase, ...] = ("start", "decide", "resume")
    followup: str = ""  # the second message of the conversation ("followup" phase)


def _reply(results: Any) -> str:
    return "Finished. " + " ".join(f"{k}={v}" for k, v in sorted(results.by_name.items()))


SCENARIOS = [
    Scenario(
        name="approvals",
        message="pay the plumber, the landlord and the gym",
        script=Script(
            "plumber, the landlord",
            [
                ToolCalls([Call("balance"), Call("payees")], text="Checking first."),
                ToolCalls(
                    [
                        Call("send", {"payee": "plumber", "amount": "3"}),
                        Call("send", {"payee": "landlord", "amount": "150"}),
                        Call("send", {"payee": "gym", "amount": "40"}),
                    ],
                    text="Paying now.",
                ),
                Reply(_reply, chunk_chars=7),
            ],
        ),
        decisions={"landlord": "140", "gym": None},
        allowed=frozenset({("plumber", "3"), ("landlord", "140")}),
    ),
    Scenario(
        name="errands",
        message="run my errands: grocer, landlord, then the gym and the plumber",
        script=Script(
            "run my errands",
            [
                ToolCalls([Call("balance"), Call("payees")]),
                ToolCalls(
                    [
                        Call("send", {"payee": "grocer", "amount": "2"}),
                        Call("send", {"payee": "landlord", "amount": "120"}),
                    ],
                    text="First the grocer and the landlord.",
                ),
                ToolCalls(
                    [
                        Call("send", {"payee": "gym", "amount": "45"}),
                        Call("send", {"payee": "plumber", "amount": "4"}),
                    ],
                    text="Now the gym and the plumber.",
                ),
                Reply(_reply, chunk_chars=6),
            ],
        ),
        decisions={"landlord": "=", "gym": "="},
        allowed=frozenset({("grocer", "2"), ("landlord", "120"), ("gym", "45"), ("plumber", "4")}),
        phases=("start", "decide", "resume", "decide", "resume"),
    ),
    Scenario(
        name="explicit-and-refusal",
        message="pay the landlord a big sum and fix the plumber",
        script=Script(
            "landlord a big sum",
            [
                ToolCalls(
                    [
                        Call("send", {"payee": "plumber", "amount": "-1"}),
                        Call("send", {"payee": "landlord", "amount": "600"}),
                    ]
                ),
                ToolCalls([Call("send", {"payee": "plumber", "amount": "5"})]),
                Reply(_reply, chunk_chars=9),
            ],
        ),
        decisions={"landlord": "=", "plumber": "="},
        allowed=frozenset({("landlord", "600"), ("plumber", "5")}),
    ),
    Scenario(
        name="conversation",
        message="tip the grocer, and then we talk about rent",
        followup="now pay the landlord",
        script=Script(
            "tip the grocer, and then",
            [
                ToolCalls([Call("balance"), Call("send", {"payee": "grocer", "amount": "3"})]),
                Reply("Tipped the grocer. What about the rent?", chunk_chars=4),
                ToolCalls([Call("send", {"payee": "landlord", "amount": "130"})]),
                Reply(_reply, chunk_chars=8),
            ],
        ),
        decisions={"landlord": "="},
        allowed=frozenset({("grocer", "3"), ("landlord", "130")}),
        phases=("start", "followup", "decide", "resume"),
    ),
    Scenario(
        name="auto-chain",
        message="tip the grocer then the plumber",
        script=Script(
            "tip the grocer",
            [
                ToolCalls([Call("send", {"payee": "grocer", "amount": "2"})]),
                ToolCalls([Call("balance"), Call("send", {"payee": "plumber", "amount": "4"})]),
                Reply(_reply, chunk_chars=5),
            ],
        ),
        allowed=frozenset({("grocer", "2"), ("plumber", "4")}),
    ),
    Scenario(
        # the first model turn writes at once: the run's creation, its first turn and the
        # ledger row share the commit before the effect
        name="write-first",
        message="pay the grocer and the landlord right away",
        script=Script(
            "grocer and the landlord right away",
            [
                ToolCalls(
                    [
                        Call("send", {"payee": "grocer", "amount": "1"}),
                        Call("send", {"payee": "landlord", "amount": "110"}),
                    ]
                ),
                Reply(_reply, chunk_chars=6),
            ],
        ),
        decisions={"landlord": "="},
        allowed=frozenset({("grocer", "1"), ("landlord", "110")}),
    ),
]


@dataclass(frozen=True)
class Paths:
    """Where one play keeps its files, and the store's database (a file, or a PostgreSQL DSN)."""

    root: Path
    backend: Backend = "sqlite"
    dsn: str = ""  # postgres: a database of its own (tests.postgres_support.create_database)

    @property
    def db(self) -> Path:
        return self.root / "runs.sqlite3"

    @property
    def effects(self) -> Path:
        return self.root / "effects.sqlite3"

    @property
    def seen(self) -> Path:
        return self.root / "seen.jsonl"

    def open_store(self) -> Store:
        if self.backend == "postgres":
            from fiduciary.stores.postgres import PostgresStore

            return PostgresStore(self.dsn, max_connections=4)
        return SQLiteStore(self.db)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Read the store's tables directly (the same tables and columns on both backends)."""
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                return conn.execute(sql.encode()).fetchall()
        if not self.db.exists():
            return []
        with sqlite3.connect(self.db) as conn:
            try:
                return conn.execute(sql).fetchall()
            except sqlite3.OperationalError:  # killed before the schema was created
                return []

    def run_exists(self) -> bool:
        if self.backend == "sqlite" and not self.db.exists():
            return False
        return bool(self.query("SELECT run_id FROM runs"))

    def run_status(self) -> str:
        rows = self.query("SELECT status FROM runs")
        assert len(rows) == 1, rows
        return str(rows[0][0])

    def payloads(self) -> list[tuple[int, str]]:
        cast = "payload::text" if self.backend == "postgres" else "payload"
        return [
            (int(r[0]), str(r[1]))
            for r in self.query(f"SELECT seq, {cast} FROM events ORDER BY seq")
        ]

    def ledger(self) -> list[tuple[str, str, str | None]]:
        return [
            (str(r[0]), str(r[1]), r[2])
            for r in self.query("SELECT key, status, error FROM ledger")
        ]


def build_agent(
    paths: Paths, kill: Kill | None, counters: Counters, scenario: Scenario
) -> tuple[Agent, EffectTarget]:
    target = EffectTarget(paths.effects)
    agent = Agent(
        model=ScriptedModel([scenario.script]),
        capabilities=capabilities(target, kill, counters),
        store=FaultyStore(paths.open_store(), kill, counters),
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        lease_seconds=0.2,  # a killed process's lease lapses quickly for the next one
    )
    return agent, target


async def _play(phase: Phase, paths: Paths, kill: Kill | None, scenario: Scenario) -> Counters:
    counters = Counters()
    agent, target = build_agent(paths, kill, counters, scenario)
    seen = os.open(paths.seen, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(event: Event) -> None:
        os.write(seen, (encode_event(event) + "\n").encode())

    try:
        if phase == "start":
            async for event in agent.run(scenario.message, principal=PRINCIPAL):
                record(event)
        else:
            runs = await agent.list_runs()
            assert len(runs) == 1, runs
            run_id = runs[0].run_id
            if phase == "followup":
                async for event in agent.run(scenario.followup, principal=PRINCIPAL, run_id=run_id):
                    record(event)
            elif phase == "decide":
                for approval in await agent.pending_approvals(run_id=run_id):
                    payee = approval.args["payee"]
                    amount = scenario.decisions.get(payee)
                    if amount is None:
                        await agent.deny(approval.approval_id, by=PRINCIPAL, reason="no")
                        continue
                    edits = None if amount == "=" else {"amount": amount}
                    typed = approval.args["amount"] if amount == "=" else amount
                    await agent.approve(
                        approval.approval_id, by=PRINCIPAL, edits=edits, confirm_amount=typed
                    )
            else:
                # a lease left by a killed process must lapse before another can drive the run
                async def lapsed() -> bool:
                    until = (await agent.get_run(run_id)).lease_until
                    return until is None or until <= agent.clock.now()

                await eventually(lapsed, what="the killed process's lease to lapse", timeout=120)
                async for event in agent.resume(run_id):
                    record(event)
    finally:
        os.close(seen)
        await agent.store.close()
        target.close()
    return counters


def run_phase(
    phase: Phase, paths: Paths, kill: Kill | None, scenario: Scenario, timeout: float = 120.0
) -> tuple[str, Counters]:
    """Play one phase in a forked child. Returns ("ok" | "killed", the child's counters).

    ``timeout`` only catches a hang: a phase takes well under a second on an idle machine."""
    paths.root.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        code = 0
        try:
            counters = asyncio.run(_play(phase, paths, kill, scenario))
            report = [counters.writes, counters.entries, counters.applied]
            os.write(write_fd, json.dumps(report).encode())
        except BaseException:
            os.write(2, traceback.format_exc().encode())
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    # the pipe reaches end of file when the child exits (or is killed): wait for that, not poll
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([read_fd], [], [], max(left, 0.0))
        if not readable:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            raise AssertionError(f"phase {phase} hung for {timeout} s (kill point {kill})")
        chunk = os.read(read_fd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed", Counters()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise AssertionError(f"phase {phase} failed with exit code {code} (kill point {kill})")
    writes, entries, applied = json.loads(data)
    return "ok", Counters(writes, entries, applied)


def seen_events(paths: Paths) -> list[dict[str, Any]]:
    if not paths.seen.exists():
        return []
    return [json.loads(line) for line in paths.seen.read_text().splitlines() if line]
