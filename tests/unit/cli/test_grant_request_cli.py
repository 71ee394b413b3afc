"""An app's ``request_grant`` card decided by ``fiduciary approvals approve | deny`` in a new
process, the engine named as ``serve`` names it (``--apps-engine``): approving creates the
grant and the app's message run saves within it; denying grants nothing; a second decision is
refused and changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fiduciary.apps import SQLiteAppTables
from fiduciary.stores.sqlite import SQLiteStore
from tests.faults.grant_child import build, enabled, saves

from .support import fiduciary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]
ENGINE = "tests.grant_engine:engine"


def waiting(db: Path, effects: Path) -> str:
    """The sweeper's message run, waiting for the grant it asked for: the approval's id."""

    async def start() -> str:
        store = SQLiteStore(db)
        try:
            engine = build(store, SQLiteAppTables(db), effects)
            await enabled(engine)
            assert (await engine.message("sweeper", "sweep the idle USDC")).waiting
            [pending] = await engine.pending("sweeper")
            assert pending.capability == "request_grant"
            return str(pending.approval_id)
        finally:
            await store.close()

    return asyncio.run(start())


def grants(db: Path) -> list[tuple[str, ...]]:
    async def read() -> list[tuple[str, ...]]:
        return [g.operations for g in await SQLiteAppTables(db).grants("sweeper")]

    return asyncio.run(read())


def decide(verb: str, approval: str, db: Path, effects: Path) -> tuple[int, str]:
    done = fiduciary(
        "approvals", verb, approval, "--by", "alice", "--db", db, "--apps-engine", ENGINE,
        env={"GRANT_EFFECTS": str(effects)}, cwd=ROOT, columns=200,
    )  # fmt: skip
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_approved_from_the_command_line_the_grant_lets_the_save_run(tmp_path: Path) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    approval = waiting(db, effects)
    code, said = decide("approve", approval, db, effects)
    assert code == 0, said
    assert said.startswith(f"approved {approval[:8]}: request_grant"), said
    assert "app sweeper message: replied" in said
    assert grants(db) == [("save",)]
    assert saves(effects) == [1]
    code, again = decide("approve", approval, db, effects)
    assert code == 1, again
    assert "already" in again
    assert saves(effects) == [1]
    assert grants(db) == [("save",)]


def test_denied_from_the_command_line_nothing_is_granted(tmp_path: Path) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    approval = waiting(db, effects)
    code, said = decide("deny", approval, db, effects)
    assert code == 0, said
    assert said.startswith(f"denied {approval[:8]}: request_grant"), said
    assert grants(db) == []
    assert saves(effects) == []  # the save waits for a card of its own
    assert "waiting for a person" in said
