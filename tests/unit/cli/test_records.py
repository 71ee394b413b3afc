"""``fiduciary audit`` and ``fiduciary ledger`` over a real SQLite file: the rows, their
filters, ``--json``, and one clear line for a bad option. The filters are run in this process
(typer's runner); the tables and a refusal as a person runs them, in a new process."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

from fiduciary import ManualClock
from fiduciary.cli.app import app
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ToolCalls, approve_all, collect

from ..conftest import Effects, make_agent
from .support import fiduciary

pytestmark = pytest.mark.timeout(120)

SEND = Script(
    "send",
    [ToolCalls([Call("balance"), Call("send", {"to": "bob", "amount": "60"})]), Reply("Sent.")],
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[UUID], str]:
    """A database with a run of alice's (a read, then a send she approved) and an hour later
    one of bob's; and the time between them."""
    db = tmp_path_factory.mktemp("records") / "runs.sqlite3"

    async def record() -> tuple[list[UUID], str]:
        store = SQLiteStore(db)
        clock = ManualClock()
        agent = make_agent(Effects(), store, clock, SEND)
        runs = []
        try:
            for principal in ("alice", "bob"):
                run_id = (await collect(agent.run("send", principal=principal)))[0].run_id
                await approve_all(agent, run_id, by=principal)
                runs.append(run_id)
                clock.advance(3600)
                if principal == "alice":
                    between = (clock.now() - timedelta(minutes=30)).isoformat()
        finally:
            await store.close()
        return runs, between

    runs, between = asyncio.run(record())
    return db, runs, between


def _lines(*args: str | Path) -> list[dict[str, Any]]:
    done = CliRunner().invoke(app, [str(a) for a in args])
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_audit_lists_every_decision_newest_first_and_filters_them(
    recorded: tuple[Path, list[UUID], str],
) -> None:
    db, (alices, bobs), between = recorded
    rows = _lines("audit", "--db", db, "--json")
    assert [(r["principal"], r["capability"], r["outcome"]) for r in rows] == [
        ("bob", "send", "ok"),
        ("bob", "send", "pending"),
        ("bob", "balance", "ok"),
        ("alice", "send", "ok"),
        ("alice", "send", "pending"),
        ("alice", "balance", "ok"),
    ]
    assert rows[0]["amount_usd"] == "60"
    assert rows[0]["tier"] == "confirm"
    assert rows[0]["input"] == {"to": "bob", "amount": "60", "memo": ""}
    assert {r["run_id"] for r in _lines("audit", "--db", db, "--json", "--principal", "alice")} == {
        str(alices)
    }
    by_prefix = _lines("audit", "--db", db, "--json", "--run", alices.hex[:8])
    assert {r["run_id"] for r in by_prefix} == {str(alices)}
    sends = _lines("audit", "--db", db, "--json", "--capability", "send", "--limit", "1")
    assert [(r["principal"], r["outcome"]) for r in sends] == [("bob", "ok")]
    later = _lines("audit", "--db", db, "--json", "--since", between)
    assert {r["run_id"] for r in later} == {str(bobs)}
    earlier = _lines("audit", "--db", db, "--json", "--until", between)
    assert {r["run_id"] for r in earlier} == {str(alices)}

    table = fiduciary("audit", "--db", db, "--principal", "alice", columns=200)
    assert table.returncode == 0, table.stderr
    assert "at (UTC)" in table.stdout
    assert "outcome" in table.stdout
    assert table.stdout.count(str(alices)[:8]) == 3
    assert "$60.00" in table.stdout
    assert "rejected" not in table.stdout
    none = CliRunner().invoke(app, ["audit", "--db", str(db), "--principal", "carol"])
    assert (none.exit_code, none.stdout.strip()) == (0, "no audit rows")


def test_ledger_lists_the_writes_with_their_results(
    recorded: tuple[Path, list[UUID], str],
) -> None:
    db, (alices, bobs), between = recorded
    rows = _lines("ledger", "--db", db, "--json")
    assert [(r["principal"], r["run_id"], r["status"]) for r in rows] == [
        ("bob", str(bobs), "done"),
        ("alice", str(alices), "done"),
    ]
    assert rows[0]["result"]["sent"] == "60"
    assert rows[0]["capability"] == "send"
    assert _lines("ledger", "--db", db, "--json", "--capability", "balance") == []
    assert [r["principal"] for r in _lines("ledger", "--db", db, "--json", "--since", between)] == [
        "bob"
    ]
    table = fiduciary("ledger", "--db", db, columns=200)
    assert table.returncode == 0, table.stderr
    assert "started (UTC)" in table.stdout
    assert table.stdout.count("done") == 2


@pytest.mark.parametrize("command", ["audit", "ledger"])
def test_a_bad_option_is_one_line_and_changes_nothing(
    command: str, recorded: tuple[Path, list[UUID], str], tmp_path: Path
) -> None:
    db = recorded[0]
    before = db.read_bytes()
    bad = fiduciary(command, "--db", db, "--since", "yesterday")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: --since 'yesterday' is not a time: give ISO 8601, e.g. 2026-03-01 or "
        "2026-03-01T09:30Z"
    )
    far = CliRunner().invoke(app, [command, "--db", str(db), "--until", "9999-12-31T23:00-05:00"])
    assert (far.exit_code, far.stderr.strip()) == (
        2,
        "error: --until '9999-12-31T23:00-05:00' is out of range in UTC",
    )
    huge = CliRunner().invoke(app, [command, "--db", str(db), "--limit", str(2**64)])
    assert huge.exit_code == 2
    assert "Traceback" not in huge.output
    unknown = CliRunner().invoke(app, [command, "--db", str(db), "--run", "abcdef12"])
    assert (unknown.exit_code, unknown.stderr.strip()) == (2, "error: no run matches 'abcdef12'")
    missing = CliRunner().invoke(app, [command, "--db", str(tmp_path / "none.sqlite3")])
    assert missing.exit_code == 2
    assert "no database at" in missing.stderr
    assert not (tmp_path / "none.sqlite3").exists()
    assert "Traceback" not in bad.stderr + unknown.stderr + missing.stderr
    assert db.read_bytes() == before
