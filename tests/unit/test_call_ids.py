"""A call's identity is the runtime's: two distinct calls never share an id or a key, whatever
ids the provider sends, and a crash between them still runs neither twice."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, CallContext, ToolCallEnd, ToolCallStart, capability
from fiduciary.events import RunCompleted
from fiduciary.models.base import ModelRequest, ToolResultsMessage
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ManualClock, allow_all, collect

from . import scenario_reused_ids as scenario
from .scenario_payments import EffectTarget

ROOT = Path(__file__).parent.parent.parent


class Recording(scenario.ReusedIds):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        return super().stream(request)


async def test_the_same_payment_asked_twice_with_one_reused_id_is_made_twice(
    store: Store, tmp_path: Path
) -> None:
    target = EffectTarget(tmp_path / "effects.sqlite3")
    model = Recording()
    agent = scenario.agent(store, target, model=model)
    events = await collect(agent.run(scenario.MESSAGE, principal="alice"))
    assert isinstance(events[-1], RunCompleted)
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert len(starts) == len(ends) == 2
    assert starts[0].tool_use_id == "call_0"  # the provider's id, while it is new in the run
    assert starts[1].tool_use_id != "call_0"
    assert [e.recovery for e in ends] == [None, None]  # neither answered from the ledger
    # two effects under two keys, each entered once, each in the ledger
    keys = target.entries()
    assert len(keys) == len(set(keys)) == 2
    assert [row[1:] for row in target.effects()] == [("bob", "5"), ("bob", "5")]
    for key in keys:
        entry = await store.ledger_get(key)
        assert entry is not None
        assert entry.status == "done"
    # the model is told about each call under the id it was recorded with
    last = model.requests[-1].messages
    uses = [u.id for m in last if hasattr(m, "tool_uses") for u in m.tool_uses]
    results = [r.tool_use_id for m in last if isinstance(m, ToolResultsMessage) for r in m.results]
    assert uses == results == [s.tool_use_id for s in starts]


async def test_a_capability_s_own_key_still_decides_what_counts_as_the_same_payment(
    store: Store, clock: ManualClock
) -> None:
    entries: list[str] = []

    @capability(
        kind="execute", tier="auto", idempotency_key=lambda args, ctx: f"once-per:{args.payee}"
    )
    async def send(payee: str, amount: str, ctx: CallContext) -> str:
        """Pay a payee at most once, ever."""
        entries.append(ctx.idempotency_key)
        return "paid"

    agent = Agent(
        model=scenario.ReusedIds(),
        capabilities=[send],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run(scenario.MESSAGE, principal="alice"))
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert entries == ["alice:once-per:bob"]
    assert [e.recovery for e in ends] == [None, "ledger"]


def _run_until_killed(db: Path, effects: Path, crash: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.scenario_reused_ids", str(db), str(effects), crash],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr  # SIGKILLed at its crash point


@pytest.mark.parametrize("crash", ["effect=1", "turn=1", "effect=2"])
async def test_a_crash_between_two_identical_payments_runs_each_once(
    tmp_path: Path, crash: str
) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    _run_until_killed(db, effects, crash)
    store = SQLiteStore(db)
    target = EffectTarget(effects)
    later = ManualClock(datetime.now(UTC) + timedelta(minutes=5))  # the dead lease has lapsed
    agent = scenario.agent(store, target, clock=later)
    (run_id,) = await agent.resume_all()
    assert (await agent.get_run(run_id)).status == "completed"
    keys = target.entries()
    # never one call twice: every key entered once; both payments made
    assert len(keys) == len(set(keys)) == 2
    assert [row[1:] for row in target.effects()] == [("bob", "5"), ("bob", "5")]
    log = await store.read_events(run_id)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    await store.close()
