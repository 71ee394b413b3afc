"""``--agent`` on ``runs resume`` and ``approvals approve | deny``, in real ``fiduciary``
processes: a run is decided and resumed by its own agent, never by another one."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from uuid import UUID

import pytest

from fiduciary.events import Event, PendingAction
from fiduciary.stores.base import RunRecord
from fiduciary.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.timeout(120)

AGENT_MODULE = '''
"""A custom agent: it pays invoices (and writes each payment to paid.txt beside it)."""

from decimal import Decimal
from pathlib import Path

from fiduciary import Agent, CallContext, capability
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

PAID = Path(__file__).with_name("paid.txt")
SCRIPT = Script(
    "pay",
    [ToolCalls([Call("pay_invoice", {"invoice": "INV-7", "amount": "150"})]), Reply("paid")],
)


def _amount(args, ctx: CallContext) -> Decimal:
    return Decimal(args.amount)


@capability(kind="execute", risk="high", amount_usd=_amount, flags={"irreversible"})
async def pay_invoice(invoice: str, amount: str) -> dict[str, str]:
    """Pay an invoice, in USD."""
    with PAID.open("a") as paid:
        paid.write(f"{invoice} {amount}\\n")
    return {"paid": invoice}


def make(store) -> Agent:
    return Agent(
        model=ScriptedModel([SCRIPT]), capabilities=[pay_invoice], store=store, authorize=allow_all
    )


def make_other_model(store) -> Agent:
    return Agent(
        model=ScriptedModel([SCRIPT], name="openai:gpt-5.1"),
        capabilities=[pay_invoice],
        store=store,
        authorize=allow_all,
    )
'''


@pytest.fixture
def billing(tmp_path: Path) -> ModuleType:
    """The custom agent's module, importable by the fiduciary processes (PYTHONPATH)."""
    path = tmp_path / "billing_agent.py"
    path.write_text(textwrap.dedent(AGENT_MODULE), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("billing_agent", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fiduciary(tmp_path: Path, *args: str | Path | UUID) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("FIDUCIARY_MODEL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "400"  # one error line stays one line
    return subprocess.run(
        [sys.executable, "-m", "fiduciary", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def suspended(db: Path, billing: ModuleType) -> tuple[UUID, UUID]:
    """A run of the custom agent waiting for the approval of its payment."""

    async def go() -> tuple[UUID, UUID]:
        store = SQLiteStore(db)
        try:
            agent = billing.make(store)
            events = [e async for e in agent.run("pay INV-7", principal="alice")]
        finally:
            await store.close()
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        return events[0].run_id, pending.approval_id

    return asyncio.run(go())


def state(db: Path, run_id: UUID) -> tuple[RunRecord, list[Event], str]:
    async def go() -> tuple[RunRecord, list[Event], str]:
        store = SQLiteStore(db)
        try:
            run = await store.get_run(run_id)
            assert run is not None
            events = await store.read_events(run_id)
            approvals = await store.list_approvals(run_id=run_id)
        finally:
            await store.close()
        return run, events, ",".join(a.status for a in approvals)

    return asyncio.run(go())


def test_the_runs_agent_decides_and_resumes_it_and_the_wallet_agent_is_refused(
    tmp_path: Path, billing: ModuleType
) -> None:
    db = tmp_path / "runs.sqlite3"
    run_id, approval_id = suspended(db, billing)
    before = state(db, run_id)

    wrong = fiduciary(tmp_path, "approvals", "approve", approval_id, "--by", "alice", "--db", db)

    assert wrong.returncode == 1, wrong.stderr
    assert wrong.stderr.strip() == (
        "error: the paper-wallet agent (the default) is not this run's agent: "
        f"run {run_id} was started by an agent with capabilities this agent lacks: "
        "pay_invoice; name the run's agent with --agent module:attribute (agent_mismatch)"
    )
    assert state(db, run_id) == before  # still pending

    right = fiduciary(
        tmp_path, "approvals", "approve", approval_id, "--by", "alice", "--db", db,
        "--agent", "billing_agent:make",
    )  # fmt: skip

    assert right.returncode == 0, right.stderr
    assert right.stdout.startswith(f"approved {str(approval_id)[:8]}: pay_invoice")
    assert f"fiduciary runs resume {run_id} --db {db} --agent billing_agent:make" in right.stdout
    approved = state(db, run_id)
    assert approved[2] == "approved"

    for args in (
        (),  # the wallet agent lacks pay_invoice
        ("--agent", "billing_agent:make_other_model"),  # the run's capabilities, another model
    ):
        refused = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, *args)
        assert refused.returncode == 1, refused.stderr
        assert "(agent_mismatch)" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert state(db, run_id) == approved  # not driven, not failed, not even leased
        assert not (tmp_path / "paid.txt").exists()
    assert "--any-model" in refused.stderr
    assert "started with the model scripted, and this agent's is openai:gpt-5.1" in refused.stderr

    resumed = fiduciary(
        tmp_path, "runs", "resume", run_id, "--db", db, "--agent", "billing_agent:make"
    )

    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} is completed" in resumed.stdout
    assert (tmp_path / "paid.txt").read_text() == "INV-7 150\n"


def test_any_model_drives_with_the_agents_own_model_and_deny_takes_agent_too(
    tmp_path: Path, billing: ModuleType
) -> None:
    db = tmp_path / "runs.sqlite3"
    run_id, approval_id = suspended(db, billing)
    other = ("--agent", "billing_agent:make_other_model")

    denied = fiduciary(
        tmp_path, "approvals", "deny", approval_id, "--by", "alice", "--db", db, *other
    )
    resumed = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, *other, "--any-model")

    assert denied.returncode == 0, denied.stderr
    assert resumed.returncode == 0, resumed.stderr
    run, _events, decided = state(db, run_id)
    assert (run.status, decided) == ("completed", "denied")
    assert not (tmp_path / "paid.txt").exists()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("billing_agent", "--agent must be module:attribute, not 'billing_agent'"),
        ("no_such_module:make", "cannot import no_such_module"),
        ("billing_agent:SCRIPT", "billing_agent:SCRIPT is not a callable agent factory"),
        ("billing_agent:[server]", "billing_agent:[server] is not a callable agent factory"),
        ("billing_agent:_amount", "the agent factory billing_agent:_amount failed: TypeError"),
    ],
)
def test_a_bad_agent_is_one_line_of_error(
    tmp_path: Path, billing: ModuleType, spec: str, says: str
) -> None:
    db = tmp_path / "runs.sqlite3"
    run_id, _ = suspended(db, billing)

    result = fiduciary(tmp_path, "runs", "resume", run_id, "--db", db, "--agent", spec)

    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall()
    connection.close()
    return [name for (name,) in rows]


@pytest.mark.parametrize("command", ["approve", "deny", "resume"])
def test_a_refused_agent_changes_nothing_in_the_file(
    tmp_path: Path, billing: ModuleType, command: str
) -> None:
    """The wallet agent (the default) refused for another agent's run makes none of its books
    in the person's own database."""
    db = tmp_path / "runs.sqlite3"
    run_id, approval_id = suspended(db, billing)
    before = tables(db)
    assert not [name for name in before if name.startswith("wallet_")]
    args = (
        ("runs", "resume", run_id)
        if command == "resume"
        else ("approvals", command, approval_id, "--by", "alice")
    )

    refused = fiduciary(tmp_path, *args, "--db", db)

    assert refused.returncode == 1, refused.stderr
    assert "(agent_mismatch)" in refused.stderr
    assert tables(db) == before
