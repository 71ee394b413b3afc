"""``fiduciary runs replay | fork | diff`` against the demo's run in a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.cli._common import program
from fiduciary.events import PendingAction, RunStarted, ToolCallStart

from .test_cli import cli, completed, ledger_figures, stored_events, with_store

__all__ = ["completed"]  # the fixture, imported for these tests

pytestmark = pytest.mark.timeout(120)


def _moved(db: Path) -> dict[str, object]:
    """The wallet's figures but savings interest, which accrues as time passes."""
    figures = ledger_figures(db)
    return {k: v for k, v in figures.items() if k not in ("savings USDC", "interest")}


def test_replay_executes_nothing_and_diff_names_the_divergence(
    completed: tuple[Path, UUID],
) -> None:
    db, run_id = completed
    figures = _moved(db)
    before = stored_events(db, run_id)

    result = cli("runs", "replay", str(run_id)[:8], "--db", db)
    assert result.exit_code == 0, result.output
    assert "nothing was executed" in result.output
    assert _moved(db) == figures  # the wallet's ledger did not move
    assert stored_events(db, run_id) == before
    runs = with_store(db, lambda s: s.list_runs())
    (replay,) = [r for r in runs if r.run_id != run_id]
    compare = f"{program()} runs diff {str(run_id)[:8]} {str(replay.run_id)[:8]} --db {db}"
    assert f"Compare them with: {compare}" in " ".join(result.output.split())  # as pasted
    started = stored_events(db, replay.run_id)[0]
    assert isinstance(started, RunStarted)
    assert started.replay_of == run_id

    same = cli("runs", "diff", str(run_id), str(run_id), "--db", db)
    assert same.exit_code == 0, same.output
    assert "the runs do not diverge" in same.output
    differs = cli("runs", "diff", str(run_id), str(replay.run_id), "--db", db)
    assert differs.exit_code == 1, differs.output
    assert "first divergence" in differs.output
    as_json = cli("runs", "diff", str(run_id), str(replay.run_id), "--json", "--db", db)
    assert '"same": false' in as_json.stdout


def test_fork_at_a_pending_action_denying_it(completed: tuple[Path, UUID]) -> None:
    db, run_id = completed
    first = next(e for e in stored_events(db, run_id) if isinstance(e, PendingAction))
    result = cli(
        "runs", "fork", str(run_id), "--at", str(first.seq), "--decide", "deny", "--db", db
    )
    assert result.exit_code in (0, 1), result.output
    assert "FORK" in result.output
    assert f"of run {run_id} at seq {first.seq}" in result.output
    inside = next(e for e in stored_events(db, run_id) if isinstance(e, ToolCallStart))
    refused = cli("runs", "fork", str(run_id), "--at", str(inside.seq), "--db", db)
    assert refused.exit_code != 0
    assert "inside a model turn" in refused.output
    bad = cli("runs", "fork", str(run_id), "--at", str(first.seq), "--decide", "maybe", "--db", db)
    assert bad.exit_code != 0
    assert "decide must be approve, deny or edit" in bad.output
