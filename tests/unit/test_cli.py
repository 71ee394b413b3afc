"""The command line against a real SQLite file: the demo, runs, approvals and their errors."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TypeVar
from uuid import UUID

import pytest
from typer.testing import CliRunner, Result

from fiduciary.cli._common import program
from fiduciary.cli.app import app
from fiduciary.cli.terminal import follow_events
from fiduciary.events import (
    ActionResolved,
    Event,
    PendingAction,
    RunCompleted,
    ToolCallEnd,
    ToolCallRejected,
    decode_event,
)
from fiduciary.stores.base import ApprovalRecord, RunRecord
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.demo import DEMO_CONVERSATION, DEMO_PRINCIPAL, LANDLORD

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo talks to a real model when a key is set: these tests stay offline."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "FIDUCIARY_MODEL"):
        monkeypatch.delenv(name, raising=False)


T = TypeVar("T")
runner = CliRunner()


def cli(*args: str | Path, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, [str(a) for a in args], input=input, env=env)


def with_store(db: Path, use: Callable[[SQLiteStore], Awaitable[T]]) -> T:
    async def go() -> T:
        store = SQLiteStore(db)
        try:
            return await use(store)
        finally:
            await store.close()

    return asyncio.run(go())


def stored_events(db: Path, run_id: UUID) -> list[Event]:
    return with_store(db, lambda s: s.read_events(run_id))


def approval(db: Path, approval_id: UUID) -> ApprovalRecord:
    record = with_store(db, lambda s: s.get_approval(approval_id))
    assert record is not None
    return record


def seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


def sends(events: list[Event]) -> list[str]:
    """The recipients of the transfers that went through."""
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "send_transfer"]
    return [json.loads(e.output.split("\n")[0])["details"]["to"] for e in ends if not e.is_error]


async def suspend(db: Path) -> tuple[UUID, UUID]:
    """A demo run stopped at its approval (the rent), written by 'another process'."""
    store = SQLiteStore(db)
    try:
        with PaperWallet(db) as wallet:
            agent = build_wallet_agent(store, wallet)
            first = [e async for e in agent.run(DEMO_CONVERSATION[0], principal=DEMO_PRINCIPAL)]
            run_id = first[0].run_id
            events = [
                e
                async for e in agent.run(
                    DEMO_CONVERSATION[1], principal=DEMO_PRINCIPAL, run_id=run_id
                )
            ]
    finally:
        await store.close()
    pending = [e for e in events if isinstance(e, PendingAction)]
    assert len(pending) == 1
    return run_id, pending[0].approval_id


@pytest.fixture
def completed(tmp_path: Path) -> tuple[Path, UUID]:
    db = tmp_path / "done.sqlite3"
    result = cli("demo", "--yes", "--db", db)
    assert result.exit_code == 0, result.output
    runs = with_store(db, lambda s: s.list_runs())
    assert len(runs) == 1
    return db, runs[0].run_id


@pytest.fixture
def suspended(tmp_path: Path) -> tuple[Path, UUID, UUID]:
    db = tmp_path / "waiting.sqlite3"
    run_id, approval_id = asyncio.run(suspend(db))
    return db, run_id, approval_id


# --- demo and runs ---------------------------------------------------------------------------


def ledger_figures(db: Path) -> dict[str, Decimal]:
    with PaperWallet(db) as wallet:
        report = wallet.balances(DEMO_PRINCIPAL)
        read = wallet.ledger.read()
        [swap] = read.transactions(principal=DEMO_PRINCIPAL, kinds=["swap"])
        interest = read.total(DEMO_PRINCIPAL, "savings", "USDC", memo="supply interest")
        assert wallet.verify().ok
    figures = {f"available {h.asset}": h.amount for h in report.available}
    figures |= {f"savings {h.asset}": h.amount for h in report.savings}
    return figures | {
        "swapped SUI": swap.change(DEMO_PRINCIPAL, "available", "SUI"),
        "interest": interest,
    }


def test_demo_with_yes_plays_the_conversation(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "demo.sqlite3"
    result = cli("demo", "--yes", "--db", db)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Balances before" in out
    assert "approval needed" in out
    assert "[large_transfer]" in out
    assert "auto-approving (send_transfer)" in out
    assert "send_transfer refused (guard_blocked)" in out
    assert "Swapped 15.00 USDC for" in out
    assert "Balances after" in out
    assert "is completed after" in out
    assert "tables wallet_transactions, wallet_postings" in out
    assert "verified" in out
    # the final balances follow from the ledger's own arithmetic
    f = ledger_figures(db)
    assert f["available USDC"] == Decimal("1000") - 20 - 75 - 15
    assert f["savings USDC"] == Decimal("1500") + 20 + f["interest"]
    assert f["available SUI"] == Decimal("150") + f["swapped SUI"] > Decimal("150")
    assert f["available ETH"] == Decimal("0.5")
    assert "890.00" in out  # the table shows the ledger's figures and their changes
    assert "(-110.00)" in out
    assert db.is_file()


def test_demo_without_an_answer_declines_the_send(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite3"
    result = cli("demo", "--db", db, input="\n")
    assert result.exit_code == 0, result.output
    assert "You declined the transfer, so nothing was sent." in result.output
    assert ledger_figures(db)["available USDC"] == Decimal("1000") - 20 - 15


def test_demo_and_chat_refuse_a_model_that_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "demo.sqlite3"
    bogus = cli("demo", "--model", "bogus", "--db", db)
    assert bogus.exit_code == 2
    assert "PROVIDER:MODEL" in bogus.output
    monkeypatch.setitem(sys.modules, "fiduciary.models.registry", None)
    for command in ("demo", "chat"):
        result = cli(command, "--model", "anthropic:claude-sonnet-4-5", "--db", db)
        assert result.exit_code == 2, result.output
        assert "only the scripted model is available" in result.output
        assert "Traceback" not in result.output
    # a key in the environment without the provider models falls back to the script
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    fallback = cli("demo", "--yes", "--db", db)
    assert fallback.exit_code == 0, fallback.output
    assert "playing the scripted conversation instead" in " ".join(fallback.output.split())


def test_chat_offline_plays_the_script_and_asks(tmp_path: Path) -> None:
    db = tmp_path / "chat.sqlite3"
    lines = [DEMO_CONVERSATION[0], "/balances", DEMO_CONVERSATION[1], "y", "/quit"]
    result = cli("chat", "--db", db, input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    assert "I am the offline scripted model" in result.output
    assert "Saved 20.00 USDC" in result.output
    assert "Balances" in result.output
    assert "approval needed" in result.output
    assert "Sent 75.00 USDC" in result.output
    assert ledger_figures_available(db) == Decimal("1000") - 20 - 75


def ledger_figures_available(db: Path) -> Decimal:
    with PaperWallet(db) as wallet:
        report = wallet.balances(DEMO_PRINCIPAL)
    return next(h.amount for h in report.available if h.asset == "USDC")


def test_chat_ends_at_the_end_of_input(tmp_path: Path) -> None:
    result = cli("chat", "--db", tmp_path / "chat.sqlite3", "--principal", "zoe", input="")
    assert result.exit_code == 0, result.output
    assert "zoe" in result.output
    assert cli("chat", "--principal", " ", "--db", tmp_path / "x.sqlite3").exit_code == 2


def test_runs_list_shows_the_completed_run(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    table = cli("runs", "list", "--db", db)
    assert table.exit_code == 0, table.output
    assert str(run_id)[:8] in table.output
    assert "completed" in table.output
    lines = cli("runs", "list", "--json", "--db", db).stdout.splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == [str(run_id)]
    assert json.loads(lines[0])["status"] == "completed"
    waiting = cli("runs", "list", "--status", "awaiting_approval", "--db", db)
    assert waiting.exit_code == 0
    assert "no runs" in waiting.output
    assert cli("runs", "list", "--status", "bogus", "--db", db).exit_code == 2


def test_fiduciary_db_names_the_default_database(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    result = cli("runs", "list", "--json", env={"FIDUCIARY_DB": str(db)})
    assert result.exit_code == 0, result.output
    assert str(run_id) in result.stdout


def test_runs_show_summarises_the_run(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    result = cli("runs", "show", str(run_id)[:6], "--db", db)
    assert result.exit_code == 0, result.output
    assert str(run_id) in result.output
    assert "completed" in result.output
    assert "10 (0 errors, 1 refused)" in result.output  # tool calls (the refresh too)
    assert "last 10 events" in result.output
    assert "run_completed" in result.output


def test_runs_events_json_is_the_gapless_log(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    result = cli("runs", "events", str(run_id), "--json", "--db", db)
    assert result.exit_code == 0, result.output
    events = [decode_event(line) for line in result.stdout.splitlines()]
    assert seqs(events) == list(range(1, len(events) + 1))
    assert events == stored_events(db, run_id)
    later = cli("runs", "events", str(run_id), "--after", "20", "--json", "--db", db)
    assert seqs([decode_event(line) for line in later.stdout.splitlines()]) == list(
        range(21, len(events) + 1)
    )


def test_runs_events_renders_for_a_person(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    result = cli("runs", "events", str(run_id)[:8], "--db", db)
    assert result.exit_code == 0, result.output
    assert "send_transfer" in result.output
    assert "Sent 75.00 USDC to 0x7a3b…b3c4" in result.output
    assert "run completed · 10 tool calls" in result.output


@pytest.mark.parametrize("flags", [["--follow"], ["--until-idle"], ["--follow", "--until-idle"]])
def test_follow_stops_at_the_end_of_a_finished_run(
    completed: tuple[Path, UUID], flags: list[str]
) -> None:
    db, run_id = completed
    result = cli("runs", "events", str(run_id), "--json", "--poll", "0.01", *flags, "--db", db)
    assert result.exit_code == 0, result.output
    events = [decode_event(line) for line in result.stdout.splitlines()]
    assert events == stored_events(db, run_id)


def test_follow_until_idle_stops_at_a_run_waiting_for_a_person(
    suspended: tuple[Path, UUID, UUID],
) -> None:
    db, run_id, _ = suspended
    result = cli("runs", "events", str(run_id), "-f", "--until-idle", "--json", "--db", db)
    assert result.exit_code == 0, result.output
    events = [decode_event(line) for line in result.stdout.splitlines()]
    assert events == stored_events(db, run_id)
    assert any(isinstance(e, PendingAction) for e in events)


async def test_follow_sees_the_commits_of_another_store(tmp_path: Path) -> None:
    """The follower's store never hears of the writer's commits: it must find them itself."""
    db = tmp_path / "live.sqlite3"
    run_id, approval_id = await suspend(db)
    reader_store, writer_store = SQLiteStore(db), SQLiteStore(db)
    seen: list[Event] = []
    caught_up = asyncio.Event()
    suspended_at = 0

    def emit(event: Event) -> None:
        seen.append(event)
        if event.seq == suspended_at:
            caught_up.set()

    follower: asyncio.Task[int] | None = None
    try:
        run = await reader_store.get_run(run_id)
        assert run is not None
        suspended_at = run.last_seq
        async with asyncio.timeout(30):
            follower = asyncio.create_task(
                follow_events(reader_store, run_id, emit, poll_seconds=0.01)
            )
            await caught_up.wait()
            assert not follower.done()  # waiting for a person is not the end of a run
            with PaperWallet(db) as wallet:
                writer = build_wallet_agent(writer_store, wallet)
                await writer.approve(approval_id, by=DEMO_PRINCIPAL)
                async for _ in writer.resume(run_id):
                    pass
            last = await follower
        stored = await writer_store.read_events(run_id)
    finally:
        if follower is not None:
            follower.cancel()
        await reader_store.close()
        await writer_store.close()
    assert seqs(seen) == list(range(1, last + 1))
    assert seen == stored
    assert any(isinstance(e, ActionResolved) and e.decision == "approved" for e in seen)
    assert isinstance(seen[-1], RunCompleted)


def test_export_round_trips_through_decode_event(
    completed: tuple[Path, UUID], tmp_path: Path
) -> None:
    db, run_id = completed
    stored = stored_events(db, run_id)
    result = cli("runs", "export", str(run_id)[:10], "--db", db)
    assert result.exit_code == 0, result.output
    assert [decode_event(line) for line in result.stdout.splitlines()] == stored
    target = tmp_path / "run.jsonl"
    to_file = cli("runs", "export", str(run_id), "-o", target, "--db", db)
    assert to_file.exit_code == 0, to_file.output
    text = target.read_text(encoding="utf-8")
    assert text == result.stdout
    assert [decode_event(line) for line in text.splitlines()] == stored


def test_resume_of_a_finished_run_does_nothing(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    before = len(stored_events(db, run_id))
    result = cli("runs", "resume", str(run_id), "--yes", "--db", db)
    assert result.exit_code == 0, result.output
    assert "nothing to resume" in result.output
    assert len(stored_events(db, run_id)) == before


# --- ids and errors --------------------------------------------------------------------------


def make_runs(db: Path, ids: list[str]) -> None:
    async def create(store: SQLiteStore) -> None:
        now = datetime.now(UTC)
        for rid in ids:
            await store.create_run(
                RunRecord(
                    run_id=UUID(rid),
                    principal="p",
                    status="completed",
                    created_at=now,
                    updated_at=now,
                )
            )

    with_store(db, create)


def test_prefixes_resolve_and_ambiguity_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "ids.sqlite3"
    first, second = "abcdef01-0000-4000-8000-000000000000", "abcdef02-0000-4000-8000-000000000000"
    make_runs(db, [first, second])
    ambiguous = cli("runs", "show", "ABCDEF", "--db", db)
    assert ambiguous.exit_code == 2
    assert "ambiguous" in ambiguous.output
    assert first in ambiguous.output
    assert second in ambiguous.output
    for ref in ("abcdef01", "ABCDEF01-00", first, first.replace("-", "")):
        shown = cli("runs", "show", ref, "--db", db)
        assert shown.exit_code == 0, (ref, shown.output)
        assert first in shown.output


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("123456", "no run matches '123456'"),
        ("12345678-0000-4000-8000-000000000000", "no run matches"),
        ("abc", "neither an id nor a prefix"),
        ("not-hex!", "neither an id nor a prefix"),
    ],
)
def test_unknown_or_malformed_ids_are_refused(
    completed: tuple[Path, UUID], ref: str, message: str
) -> None:
    db, _ = completed
    for command in (["runs", "show"], ["runs", "export"], ["runs", "resume"]):
        result = cli(*command, ref, "--db", db)
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "Traceback" not in result.output
    refused = cli("approvals", "approve", ref, "--by", DEMO_PRINCIPAL, "--db", db)
    assert refused.exit_code == 2
    assert "approval" in refused.output


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "list"],
        ["runs", "show", "abcdef"],
        ["runs", "events", "abcdef", "--follow"],
        ["runs", "export", "abcdef"],
        ["runs", "resume", "abcdef", "--yes"],
        ["approvals", "list"],
        ["approvals", "approve", "abcdef", "--by", "x"],
        ["approvals", "deny", "abcdef", "--by", "x"],
    ],
)
def test_a_missing_database_is_reported_and_not_created(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "absent.sqlite3"
    result = cli(*command, "--db", db)
    assert result.exit_code == 2
    assert f"no database at {db}" in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_database_is_one_line_of_error(tmp_path: Path) -> None:
    db = tmp_path / "garbage.sqlite3"
    db.write_bytes(b"this is not a database\n" * 200)
    result = cli("runs", "list", "--db", db)
    assert result.exit_code == 2
    assert result.output.startswith("error:")
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


# --- approvals -------------------------------------------------------------------------------


def test_approvals_list_shows_what_waits(suspended: tuple[Path, UUID, UUID]) -> None:
    db, run_id, approval_id = suspended
    result = cli("approvals", "list", "--db", db, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for text in (str(approval_id)[:8], str(run_id)[:8], "send_transfer", "$75.00", "confirm"):
        assert text in result.output
    assert "pending" in result.output
    lines = cli("approvals", "list", "--json", "--db", db).stdout.splitlines()
    assert [json.loads(line)["approval_id"] for line in lines] == [str(approval_id)]
    others = cli("approvals", "list", "--principal", "someone-else", "--db", db)
    assert "no pending approvals" in others.output
    shown = cli("runs", "show", str(run_id), "--db", db, env={"COLUMNS": "400"})
    assert "waiting for a decision" in shown.output
    assert str(approval_id)[:8] in shown.output
    # the hint names the program as it runs when pasted, and the file
    hint = f"decide with: {program()} approvals approve ID --by {DEMO_PRINCIPAL} --db {db}"
    assert hint in shown.output


def test_approve_then_resume_pays_the_rent(suspended: tuple[Path, UUID, UUID]) -> None:
    db, run_id, approval_id = suspended
    approved = cli("approvals", "approve", str(approval_id)[:8], "--by", DEMO_PRINCIPAL, "--db", db)
    assert approved.exit_code == 0, approved.output
    assert "approved" in approved.output
    resume = f"{program()} runs resume {run_id} --db {db}"  # as it runs when pasted
    assert f"resume the run with: {resume}" in approved.output
    record = approval(db, approval_id)
    assert (record.status, record.decided_by) == ("approved", DEMO_PRINCIPAL)
    assert "no pending approvals" in cli("approvals", "list", "--db", db).output
    assert "approved" in cli("approvals", "list", "--all", "--db", db).output

    resumed = cli("runs", "resume", str(run_id)[:8], "--yes", "--db", db)
    assert resumed.exit_code == 0, resumed.output
    assert "completed" in resumed.output
    events = stored_events(db, run_id)
    assert seqs(events) == list(range(1, len(events) + 1))
    assert sends(events) == [LANDLORD]
    assert any(isinstance(e, ActionResolved) and e.by == DEMO_PRINCIPAL for e in events)
    assert isinstance(events[-1], RunCompleted)


def test_approving_twice_is_refused(suspended: tuple[Path, UUID, UUID]) -> None:
    db, _, approval_id = suspended
    assert (
        cli("approvals", "approve", str(approval_id), "--by", DEMO_PRINCIPAL, "--db", db).exit_code
        == 0
    )
    again = cli("approvals", "approve", str(approval_id), "--by", DEMO_PRINCIPAL, "--db", db)
    assert again.exit_code == 1
    assert "already approved" in again.output
    denied = cli("approvals", "deny", str(approval_id), "--by", DEMO_PRINCIPAL, "--db", db)
    assert denied.exit_code == 1
    assert "already approved" in denied.output
    assert approval(db, approval_id).status == "approved"


def test_another_principal_may_not_decide(suspended: tuple[Path, UUID, UUID]) -> None:
    db, _, approval_id = suspended
    for verb in ("approve", "deny"):
        result = cli("approvals", verb, str(approval_id), "--by", "mallory", "--db", db)
        assert result.exit_code == 1
        assert "forbidden" in result.output
        assert "belongs to demo-user" in result.output
        assert "Traceback" not in result.output
    assert approval(db, approval_id).status == "pending"


def test_edits_are_checked(suspended: tuple[Path, UUID, UUID]) -> None:
    db, _, approval_id = suspended
    ref = str(approval_id)
    not_editable = cli(
        "approvals",
        "approve",
        ref,
        "--by",
        DEMO_PRINCIPAL,
        "--edit",
        f"to={LANDLORD[:-1]}0",
        "--db",
        db,
    )
    assert not_editable.exit_code == 1
    assert "field_not_modifiable" in not_editable.output
    malformed = cli("approvals", "approve", ref, "--by", DEMO_PRINCIPAL, "--edit", "x", "--db", db)
    assert malformed.exit_code == 2
    assert "field=value" in malformed.output
    assert approval(db, approval_id).status == "pending"


def test_deny_then_resume_tells_the_model(suspended: tuple[Path, UUID, UUID]) -> None:
    db, run_id, approval_id = suspended
    denied = cli(
        "approvals",
        "deny",
        str(approval_id)[:6],
        "--by",
        DEMO_PRINCIPAL,
        "--reason",
        "not now",
        "--db",
        db,
    )
    assert denied.exit_code == 0, denied.output
    assert "denied" in denied.output
    assert "fiduciary runs resume" in denied.output
    record = approval(db, approval_id)
    assert (record.status, record.reason) == ("denied", "not now")

    resumed = cli("runs", "resume", str(run_id), "--db", db)
    assert resumed.exit_code == 0, resumed.output
    events = stored_events(db, run_id)
    assert sends(events) == []
    assert any(isinstance(e, ToolCallRejected) and e.reason == "denied" for e in events)
    assert isinstance(events[-1], RunCompleted)


def test_resume_asks_and_no_answer_declines(suspended: tuple[Path, UUID, UUID]) -> None:
    db, run_id, approval_id = suspended
    result = cli("runs", "resume", str(run_id), "--db", db, input="")
    assert result.exit_code == 0, result.output
    assert "approval needed" in result.output
    assert "no input: declining" in result.output
    record = approval(db, approval_id)
    assert (record.status, record.reason) == ("denied", "declined at the terminal")
    assert sends(stored_events(db, run_id)) == []


def test_resume_with_yes_approves_and_pays(suspended: tuple[Path, UUID, UUID]) -> None:
    db, run_id, approval_id = suspended
    result = cli("runs", "resume", str(run_id), "--yes", "--db", db)
    assert result.exit_code == 0, result.output
    assert "auto-approving (send_transfer)" in result.output
    assert approval(db, approval_id).status == "approved"
    assert sends(stored_events(db, run_id)) == [LANDLORD]
